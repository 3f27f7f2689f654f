# Copies proto file IN to OUT without its `service` blocks (messages only).
file(READ ${IN} text)
string(REGEX REPLACE "service [A-Za-z0-9_]+ {[^}]*}" "" text "${text}")
get_filename_component(dir ${OUT} DIRECTORY)
file(MAKE_DIRECTORY ${dir})
file(WRITE ${OUT} "${text}")

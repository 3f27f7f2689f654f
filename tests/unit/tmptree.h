/* Temporary directory trees of the unit tests: removal of a whole tree
 * (links not followed), shared by the tests that make one. */
#ifndef KDEV_TESTS_TMPTREE_H
#define KDEV_TESTS_TMPTREE_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static inline int tmptree_rm_cb(const char *path, const struct stat *sb, int flag,
                                struct FTW *ftw)
{
        (void)sb;
        (void)flag;
        (void)ftw;
        return remove(path);
}

/* Removes |dir| and everything below it (links are not followed). */
static inline void tmptree_remove(const char *dir)
{
        nftw(dir, tmptree_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

#endif /* KDEV_TESTS_TMPTREE_H */

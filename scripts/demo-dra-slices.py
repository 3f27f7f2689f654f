#!/usr/bin/python3
"""For scripts/demo.sh (node 3): waits until the stand-in API server at URL
holds every ResourceSlice of the pool of DRIVER for NODE and prints one line
per slice: its pool, generation, slice count and device names (or counter-set
names). Exit 1 after TIMEOUT seconds without the whole pool.
Usage: demo-dra-slices.py URL TOKEN NODE DRIVER [TIMEOUT]"""
import json
import sys
import time
import urllib.request


def slices(url, token, node, driver):
    req = urllib.request.Request(url + "/apis/resource.k8s.io/v1/resourceslices",
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=10) as r:
        items = json.load(r)["items"]
    return [s for s in items
            if s["spec"].get("nodeName") == node and s["spec"].get("driver") == driver]


def main():
    if len(sys.argv) not in (5, 6):
        sys.stderr.write(__doc__.split("\n")[-1] + "\n")
        return 2
    url, token, node, driver = sys.argv[1:5]
    deadline = time.monotonic() + (float(sys.argv[5]) if len(sys.argv) == 6 else 30)
    while True:
        found = slices(url, token, node, driver)
        # the whole pool: every slice of its newest generation written
        gen = max((x["spec"]["pool"]["generation"] for x in found), default=0)
        found = [x for x in found if x["spec"]["pool"]["generation"] == gen]
        if found and len(found) == found[0]["spec"]["pool"]["resourceSliceCount"]:
            break
        if time.monotonic() > deadline:
            sys.stderr.write("no ResourceSlice for node %s, driver %s\n" % (node, driver))
            return 1
        time.sleep(0.1)
    for s in sorted(found, key=lambda x: x["metadata"]["name"]):
        pool = s["spec"]["pool"]
        names = [d["name"] for d in s["spec"].get("devices", [])]
        sets = [c["name"] for c in s["spec"].get("sharedCounters", [])]
        what = "%d devices: %s" % (len(names), " ".join(names))
        if sets and not names:
            what = "counter sets: %s" % " ".join(sets)
        elif sets:
            what += "; counter sets: %s" % " ".join(sets)
        print("ResourceSlice for %s: driver %s, pool %s (generation %d, %d slice(s)), %s"
              % (node, driver, pool["name"], pool["generation"], pool["resourceSliceCount"],
                 what))
    return 0


if __name__ == "__main__":
    sys.exit(main())

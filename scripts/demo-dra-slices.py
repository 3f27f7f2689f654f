#!/usr/bin/python3
"""For scripts/demo.sh (node 3): waits until the stand-in API server at URL
holds a ResourceSlice of DRIVER for NODE and prints one line per slice: its
pool, generation, slice count and device names. Exit 1 after TIMEOUT seconds
without one.
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
        if found:
            break
        if time.monotonic() > deadline:
            sys.stderr.write("no ResourceSlice for node %s, driver %s\n" % (node, driver))
            return 1
        time.sleep(0.1)
    for s in sorted(found, key=lambda x: x["metadata"]["name"]):
        pool = s["spec"]["pool"]
        names = [d["name"] for d in s["spec"].get("devices", [])]
        print("ResourceSlice for %s: driver %s, pool %s (generation %d, %d slice(s)), "
              "%d devices: %s" % (node, driver, pool["name"], pool["generation"],
                                  pool["resourceSliceCount"], len(names), " ".join(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

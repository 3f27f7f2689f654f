#!/usr/bin/python3
"""Stand-in Kubernetes API server for kdev's tests (Python 3 stdlib only).

No kube-apiserver runs on the test machines, so tests start this one. It
implements the REST paths kdev's DRA plugin uses, with the semantics of the
real server that a client can observe:

  /api/v1/nodes[/NAME]
  /apis/resource.k8s.io/VER/resourceslices[/NAME]              (cluster scoped)
  /apis/resource.k8s.io/VER/deviceclasses[/NAME]               (cluster scoped)
  /apis/resource.k8s.io/VER/resourceclaims                     (LIST, all namespaces)
  /apis/resource.k8s.io/VER/namespaces/NS/resourceclaims[/NAME[/status]]
  /version                                                     (GET: --kube-version)

  VER is one of --versions (default v1,v1beta1); objects are stored in the v1
  shape and converted on the way in and out (v1beta1 wraps device fields in
  `basic` and has no `exactly` in claim requests). An unserved version is 404.

  GET (one / LIST with fieldSelector, limit and continue), POST (create, name
  or generateName: 5 random characters appended), PUT (resourceVersion must
  match: 409 Conflict otherwise, 422 when missing; spec.driver and
  spec.nodeName of a slice are immutable: 422), DELETE (optional DeleteOptions
  body with preconditions uid / resourceVersion: 409 on mismatch; returns the
  deleted object), DELETE collection (fieldSelector; returns the deleted items
  as a List). resourceVersion is one counter for the whole store, incremented
  on every write; uid and creationTimestamp are set on create. PUT on the main
  resource keeps the stored status, PUT on .../status changes only status;
  GET on .../status answers the whole object, as the real server does.
  Deleting a Node deletes the objects whose ownerReferences name its uid.
  Errors carry a v1 Status body (kind Status, status Failure, message, reason,
  details, code) like the real server's.

  Field selectors: `spec.nodeName` and `spec.driver` on resourceslices,
  `metadata.name` everywhere, `metadata.namespace` on claims; operators `=`,
  `==`, `!=`, terms separated by `,` (all must hold). Others are 400
  ("field label not supported: X"). labelSelector is 400 (not implemented
  by the stand-in).

  Watch (GET on a collection with watch=1|true): a chunked stream of
  newline-ended WatchEvents {"type": ADDED|MODIFIED|DELETED, "object": ...}
  for the objects matching the field selector, from resourceVersion (empty
  or "0": ADDED for every current object first, as the real server's "most
  recent" start), until timeoutSeconds (default 1800) or the API port goes
  down. A resourceVersion older than the event log (resourceVersion 1 or
  below the store's first) is answered with one ERROR event holding a 410
  Gone Status, as the real server answers an expired version.

  PATCH with Content-Type application/merge-patch+json or
  application/strategic-merge-patch+json: an RFC 7386 merge patch of the
  object (for labels and annotations, what kubectl label / annotate send);
  other types 415. uid, name, namespace and creationTimestamp cannot change.

Authentication: with --token T, requests need `Authorization: Bearer T` or
(with --tls) a client certificate signed by the test CA; otherwise 401.

TLS: --tls DIR serves HTTPS with a self-signed CA made with the openssl CLI in
DIR (ca.crt, server.crt/key for 127.0.0.1 and localhost, client.crt/key with
CN kdev-test); client certificates are optional and verified against ca.crt.

Admin API (plain HTTP on its own port, no auth), for tests:
  POST   /_admin/objects        object JSON (apiVersion + kind) stored as is,
                                replacing one of the same name; uid, rv and
                                creationTimestamp assigned unless given. Use it
                                to seed Nodes and ResourceClaims with
                                status.allocation as the scheduler writes it.
  GET    /_admin/objects        {"items": every stored object (v1 shapes)}
  POST   /_admin/faults         {"status": 500|429|..., "count": N,
                                 "method": "PUT", "path": "/apis/...prefix",
                                 "retry_after": seconds, "mode": "status"|"reset"
                                 |"big_header"|"redirect"|"body", "size": bytes,
                                 "location": URL, "body": JSON}
                                the next N matching API requests fail with that
                                status (or, mode reset, with a dropped
                                connection; mode big_header: 200 with a header
                                line "X-Big: aaa..." of |size| bytes in all;
                                mode redirect: |status| with "Location:
                                |location|" when given; mode body: |status|
                                (default 200) with |body| as the JSON
                                answer, e.g. an array); method/path are
                                optional filters
  DELETE /_admin/faults         clears the faults
  POST   /_admin/delay          {"seconds": S, "method": "PUT", "path": "/apis/...prefix"}
                                every matching API request (method/path optional
                                filters) is held S seconds before it is handled
                                (faults apply after the hold); until cleared
  GET    /_admin/delay          {"waiting": requests held now, "delays": [...]}
  DELETE /_admin/delay          clears the delays; held requests go on at once
  POST   /_admin/down           {"seconds": S (optional)} closes the API port
                                (and drops kept-alive connections); back on the
                                same port after S seconds when given
  POST   /_admin/up             reopens the API port
  POST   /_admin/token          {"token": "new"} changes the accepted token
  GET    /_admin/requests       {"items": [{"method","path","query","status","auth"}...]}
                                every API request seen (after faults)
  DELETE /_admin/requests       clears that log

Startup: prints one JSON line on stdout, then serves until stdin reaches EOF
or SIGTERM/SIGINT:
  {"port": P, "admin_port": A, "url": "http(s)://127.0.0.1:P",
   "admin_url": "http://127.0.0.1:A", "ca": path|null, "client_cert": ..., "client_key": ...}
"""
import argparse
import copy
import datetime
import faulthandler
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GROUP = "resource.k8s.io"

# resource -> (group, cluster scoped?, Kind)
RESOURCES = {
    "nodes": ("", True, "Node"),
    "resourceslices": (GROUP, True, "ResourceSlice"),
    "deviceclasses": (GROUP, True, "DeviceClass"),
    "resourceclaims": (GROUP, False, "ResourceClaim"),
}
KIND_TO_RESOURCE = {v[2]: k for k, v in RESOURCES.items()}

FIELDS = {
    "resourceslices": {"metadata.name", "spec.nodeName", "spec.driver"},
    "resourceclaims": {"metadata.name", "metadata.namespace"},
    "nodes": {"metadata.name"},
    "deviceclasses": {"metadata.name"},
}

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's SimpleNameGenerator alphabet


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def qualified(resource):
    group = RESOURCES[resource][0]
    return resource + ("." + group if group else "")


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def get_field(obj, dotted):
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return ""
        cur = cur[part]
    return "" if cur is None else str(cur)


# --- v1 <-> v1beta1 conversion ------------------------------------------------

def slice_to_v1beta1(obj):
    spec = obj.get("spec") or {}
    devs = spec.get("devices")
    if isinstance(devs, list):
        out = []
        for d in devs:
            d = dict(d)
            name = d.pop("name", None)
            nd = {"name": name} if name is not None else {}
            nd["basic"] = d
            out.append(nd)
        spec["devices"] = out
    return obj


def slice_from_v1beta1(obj):
    spec = obj.get("spec") or {}
    devs = spec.get("devices")
    if isinstance(devs, list):
        out = []
        for d in devs:
            nd = {}
            if "name" in d:
                nd["name"] = d["name"]
            nd.update(d.get("basic") or {})
            out.append(nd)
        spec["devices"] = out
    return obj


EXACT_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess",
                "tolerations", "capacity")


def claim_to_v1beta1(obj):
    reqs = ((obj.get("spec") or {}).get("devices") or {}).get("requests")
    if isinstance(reqs, list):
        for i, r in enumerate(reqs):
            if "exactly" in r:
                nr = {"name": r.get("name")}
                nr.update(r["exactly"])
                reqs[i] = nr
    return obj


def claim_from_v1beta1(obj):
    reqs = ((obj.get("spec") or {}).get("devices") or {}).get("requests")
    if isinstance(reqs, list):
        for i, r in enumerate(reqs):
            if "firstAvailable" in r or "exactly" in r:
                continue
            ex = {k: r[k] for k in EXACT_FIELDS if k in r}
            reqs[i] = {"name": r.get("name"), "exactly": ex}
    return obj


def to_version(resource, version, obj):
    obj = copy.deepcopy(obj)
    group = RESOURCES[resource][0]
    obj["apiVersion"] = (group + "/" + version) if group else version
    obj["kind"] = RESOURCES[resource][2]
    if version == "v1beta1":
        if resource == "resourceslices":
            slice_to_v1beta1(obj)
        elif resource == "resourceclaims":
            claim_to_v1beta1(obj)
    return obj


def from_version(resource, version, obj):
    obj = copy.deepcopy(obj)
    if version == "v1beta1":
        if resource == "resourceslices":
            slice_from_v1beta1(obj)
        elif resource == "resourceclaims":
            claim_from_v1beta1(obj)
    group = RESOURCES[resource][0]
    obj["apiVersion"] = (group + "/v1") if group else "v1"
    obj["kind"] = RESOURCES[resource][2]
    return obj


# --- the store -------------------------------------------------------------------

class Store:
    def __init__(self):
        self.lock = threading.RLock()
        self.rv = 1000
        self.first_rv = self.rv
        self.objs = {}  # (resource, ns, name) -> v1 object
        self.events = []  # (rv, type, resource, ns, object): every change, for watches
        self.cond = threading.Condition(self.lock)

    def _event(self, kind, resource, ns, obj):
        self.events.append((self.rv, kind, resource, ns, copy.deepcopy(obj)))
        self.cond.notify_all()

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    def _new_meta(self, obj, resource, ns):
        md = obj.setdefault("metadata", {})
        if not md.get("name"):
            gen = md.get("generateName")
            if not gen:
                raise ApiError(422, "Invalid", "%s is invalid: metadata.name: Required value: "
                               "name or generateName is required" % RESOURCES[resource][2])
            for _ in range(100):
                cand = gen + "".join(random.choice(NAME_CHARS) for _ in range(5))
                if (resource, ns, cand) not in self.objs:
                    md["name"] = cand
                    break
        if ns:
            md["namespace"] = ns
        md.setdefault("uid", str(uuid.uuid4()))
        md.setdefault("creationTimestamp", now_rfc3339())
        md["resourceVersion"] = self.next_rv()
        return md["name"]

    def create(self, resource, ns, obj):
        with self.lock:
            md = obj.setdefault("metadata", {})
            if md.get("resourceVersion"):
                raise ApiError(400, "BadRequest",
                               "resourceVersion should not be set on objects to be created")
            name = md.get("name")
            if name and (resource, ns, name) in self.objs:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists'
                               % (qualified(resource), name),
                               {"name": name, "group": RESOURCES[resource][0], "kind": resource})
            md.pop("uid", None)
            name = self._new_meta(obj, resource, ns)
            self.objs[(resource, ns, name)] = obj
            self._event("ADDED", resource, ns, obj)
            return copy.deepcopy(obj)

    def seed(self, resource, ns, obj):
        with self.lock:
            md = obj.setdefault("metadata", {})
            old = self.objs.get((resource, ns, md.get("name")))
            if old and "uid" not in md:
                md["uid"] = old["metadata"]["uid"]
            md.pop("resourceVersion", None)
            name = self._new_meta(obj, resource, ns)
            self.objs[(resource, ns, name)] = obj
            self._event("MODIFIED" if old else "ADDED", resource, ns, obj)
            return copy.deepcopy(obj)

    def patch(self, resource, ns, name, patch):
        with self.lock:
            cur = self.objs.get((resource, ns, name))
            if cur is None:
                raise self.not_found(resource, name)
            if not isinstance(patch, dict):
                raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
            new = merge_patch(copy.deepcopy(cur), patch)
            nmd = new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in cur["metadata"]:
                    nmd[k] = cur["metadata"][k]
            nmd["resourceVersion"] = self.next_rv()
            self.objs[(resource, ns, name)] = new
            self._event("MODIFIED", resource, ns, new)
            return copy.deepcopy(new)

    def not_found(self, resource, name):
        return ApiError(404, "NotFound", '%s "%s" not found' % (qualified(resource), name),
                        {"name": name, "group": RESOURCES[resource][0], "kind": resource})

    def get(self, resource, ns, name):
        with self.lock:
            obj = self.objs.get((resource, ns, name))
            if obj is None:
                raise self.not_found(resource, name)
            return copy.deepcopy(obj)

    def update(self, resource, ns, name, obj, subresource):
        with self.lock:
            cur = self.objs.get((resource, ns, name))
            if cur is None:
                raise self.not_found(resource, name)
            md = obj.get("metadata") or {}
            if md.get("name") and md["name"] != name:
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match "
                               "the name on the URL (%s)" % (md["name"], name))
            rv = md.get("resourceVersion")
            if not rv:
                raise ApiError(422, "Invalid", '%s "%s" is invalid: metadata.resourceVersion: '
                               "Invalid value: 0x0: must be specified for an update"
                               % (RESOURCES[resource][2], name))
            if md.get("uid") and md["uid"] != cur["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, "
                               "UID in object meta: %s" % (md["uid"], cur["metadata"]["uid"]))
            if rv != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict",
                               'Operation cannot be fulfilled on %s "%s": the object has been '
                               "modified; please apply your changes to the latest version and "
                               "try again" % (qualified(resource), name),
                               {"name": name, "group": RESOURCES[resource][0], "kind": resource})
            new = copy.deepcopy(cur)
            if subresource == "status":
                new["status"] = copy.deepcopy(obj.get("status"))
                if new["status"] is None:
                    del new["status"]
            else:
                if resource == "resourceslices":
                    for f in ("driver", "nodeName"):
                        a = (cur.get("spec") or {}).get(f)
                        b = (obj.get("spec") or {}).get(f)
                        if a != b:
                            raise ApiError(422, "Invalid", 'ResourceSlice.resource.k8s.io "%s" '
                                           "is invalid: spec.%s: Invalid value: %s: field is "
                                           "immutable" % (name, f, json.dumps(b)))
                keep_status = cur.get("status")
                new = copy.deepcopy(obj)
                nmd = new.setdefault("metadata", {})
                for k in ("uid", "creationTimestamp", "namespace", "name"):
                    if k in cur["metadata"]:
                        nmd[k] = cur["metadata"][k]
                new.pop("status", None)
                if keep_status is not None and resource != "nodes":
                    new["status"] = keep_status
                elif resource == "nodes" and "status" in obj:
                    new["status"] = obj["status"]
            new["metadata"]["resourceVersion"] = self.next_rv()
            self.objs[(resource, ns, name)] = new
            self._event("MODIFIED", resource, ns, new)
            return copy.deepcopy(new)

    def delete(self, resource, ns, name, preconditions):
        with self.lock:
            cur = self.objs.get((resource, ns, name))
            if cur is None:
                raise self.not_found(resource, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition: %s, "
                               "UID in object meta: %s" % (pre["uid"], cur["metadata"]["uid"]))
            if pre.get("resourceVersion") and \
                    pre["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "Precondition failed: ResourceVersion in "
                               "precondition: %s, ResourceVersion in object meta: %s"
                               % (pre["resourceVersion"], cur["metadata"]["resourceVersion"]))
            del self.objs[(resource, ns, name)]
            self.next_rv()
            gone = copy.deepcopy(cur)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._event("DELETED", resource, ns, gone)
            if resource == "nodes":
                uid = cur["metadata"]["uid"]
                for key, o in list(self.objs.items()):
                    for ref in (o.get("metadata") or {}).get("ownerReferences") or []:
                        if ref.get("uid") == uid:
                            del self.objs[key]
                            break
            return copy.deepcopy(cur)

    def list(self, resource, ns, selector):
        with self.lock:
            out = []
            for (r, ons, _name), obj in sorted(self.objs.items()):
                if r != resource or (ns is not None and ons != ns):
                    continue
                if all((get_field(obj, f) == v) == eq for f, eq, v in selector):
                    out.append(copy.deepcopy(obj))
            return out, str(self.rv)


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch of |patch| onto |target|; returns the result."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge_patch(target.get(k), v)
    return target


def parse_selector(resource, text):
    terms = []
    if not text:
        return terms
    for term in text.split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            f, v = term.split("!=", 1)
            eq = False
        elif "==" in term:
            f, v = term.split("==", 1)
            eq = True
        elif "=" in term:
            f, v = term.split("=", 1)
            eq = True
        else:
            raise ApiError(400, "BadRequest", "invalid field selector: %s" % term)
        f = f.strip()
        if f not in FIELDS[resource]:
            raise ApiError(400, "BadRequest", '"%s" is not a known field selector: only "%s"'
                           % (f, '", "'.join(sorted(FIELDS[resource]))))
        terms.append((f, eq, v.strip()))
    return terms


# --- HTTP ------------------------------------------------------------------------

class State:
    def __init__(self, args):
        self.args = args
        self.store = Store()
        self.lock = threading.Lock()
        self.token = args.token
        self.faults = []
        self.delays = []  # {"seconds", "method", "path"}: requests held before handling
        self.delay_cond = threading.Condition(self.lock)
        self.delay_gen = 0  # bumped by DELETE /_admin/delay: held requests go on
        self.waiting = 0  # requests held now
        self.requests = []
        self.versions = [v for v in args.versions.split(",") if v]
        self.kube_minor = int(args.kube_version.split(".")[1])
        self.down = False
        self.api = None
        self.api_thread = None
        self.port = 0
        self.ssl_ctx = None
        self.timer = None
        self.conns = set()


def validate_slice(state, obj):
    """The ResourceSlice validation rules kdev's slices meet (k8s.io/api
    resource/v1 types.go limits; 1.35+: a slice holds devices or
    sharedCounters, not both; partitionable devices: at most 64 per slice,
    their counter sets in the same slice on 1.34)."""
    spec = obj.get("spec") or {}
    bad = "ResourceSlice.resource.k8s.io is invalid: "
    devices = spec.get("devices") or []
    sets = spec.get("sharedCounters") or []
    if not spec.get("driver"):
        raise ApiError(422, "Invalid", bad + "spec.driver: Required value")
    if len(devices) > 128:
        raise ApiError(422, "Invalid", bad + "spec.devices: Too many: %d: must have at most "
                       "128 items" % len(devices))
    counting = [d for d in devices if d.get("consumesCounters")]
    if counting and len(devices) > 64:
        raise ApiError(422, "Invalid", bad + "spec.devices: Too many: %d: must have at most "
                       "64 items when devices consume counters" % len(devices))
    if len(sets) > 8:
        raise ApiError(422, "Invalid", bad + "spec.sharedCounters: Too many: %d: must have "
                       "at most 8 items" % len(sets))
    if state.kube_minor >= 35 and devices and sets:
        raise ApiError(422, "Invalid", bad + "spec: Invalid value: only one of devices or "
                       "sharedCounters may be set")
    if state.kube_minor < 35:
        names = {c.get("name") for c in sets}
        for d in counting:
            for c in d["consumesCounters"]:
                if c.get("counterSet") not in names:
                    raise ApiError(422, "Invalid", bad + "spec.devices[%s].consumesCounters: "
                                   "Invalid value: %r: counter set not in this slice"
                                   % (d.get("name"), c.get("counterSet")))


def route(state, path):
    """Returns (resource, version, ns, name, subresource) or raises 404."""
    parts = [p for p in path.split("/") if p != ""]
    nf = ApiError(404, "NotFound", "the server could not find the requested resource")
    if len(parts) >= 3 and parts[0] == "api" and parts[1] == "v1" and parts[2] == "nodes":
        if len(parts) > 4:
            raise nf
        return "nodes", "v1", "", (parts[3] if len(parts) == 4 else None), None
    if len(parts) < 4 or parts[0] != "apis" or parts[1] != GROUP:
        raise nf
    version = parts[2]
    if version not in state.versions:
        raise nf
    rest = parts[3:]
    ns = ""
    if rest[0] == "namespaces":
        if len(rest) < 3:
            raise nf
        ns = rest[1]
        rest = rest[2:]
    resource = rest[0]
    if resource not in RESOURCES or resource == "nodes":
        raise nf
    scoped_cluster = RESOURCES[resource][1]
    if ns and scoped_cluster:
        raise nf
    name = rest[1] if len(rest) >= 2 else None
    sub = rest[2] if len(rest) >= 3 else None
    if len(rest) > 3 or (sub is not None and sub != "status"):
        raise nf
    if not ns and not scoped_cluster:
        if name is not None:
            raise nf
        ns = None  # LIST across namespaces
    return resource, version, ns, name, sub


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one request costs no 40 ms delayed ACK
    server_version = "kdev-kubeapi/1"

    def log_message(self, fmt, *a):  # quiet unless asked
        if self.server.state.args.verbose:
            sys.stderr.write("kubeapi: " + (fmt % a) + "\n")

    def handle_one_request(self):
        # Once the port is "down", kept-alive connections are dropped too.
        if self.server.state.down:
            self.close_connection = True
            return
        super().handle_one_request()

    def send_json(self, code, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", "the body of the request was in an unknown "
                           "format: %s" % e)

    def authed(self):
        st = self.server.state
        if not st.token and not st.args.tls:
            return True
        if not st.token and st.args.tls and not st.args.client_cert_auth:
            return True
        auth = self.headers.get("Authorization") or ""
        if st.token and auth == "Bearer " + st.token:
            return True
        if st.args.tls:
            try:
                cert = self.connection.getpeercert()
            except (AttributeError, ValueError):
                cert = None
            if cert:
                return True
        return False

    def handle_api(self, method):
        st = self.server.state
        if st.down:
            self.close_connection = True
            return
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        entry = {"method": method, "path": u.path, "query": u.query, "status": 0,
                 "auth": self.headers.get("Authorization") is not None}
        # delays first: they model a slow server (the request is then handled)
        with st.lock:
            delay = None
            for d in st.delays:
                if d.get("method") and d["method"] != method:
                    continue
                if d.get("path") and not u.path.startswith(d["path"]):
                    continue
                delay = d
                break
            if delay:
                st.waiting += 1
                gen = st.delay_gen
                deadline = time.monotonic() + float(delay["seconds"])
                while st.delay_gen == gen:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    st.delay_cond.wait(left)
                st.waiting -= 1
        # faults next: they model an overloaded or broken server
        fault = None
        with st.lock:
            for f in st.faults:
                if f["count"] <= 0:
                    continue
                if f.get("method") and f["method"] != method:
                    continue
                if f.get("path") and not u.path.startswith(f["path"]):
                    continue
                f["count"] -= 1
                fault = dict(f)
                break
        if fault:
            entry["status"] = fault.get("status", 500)
            entry["fault"] = True
            with st.lock:
                st.requests.append(entry)
            if method in ("POST", "PUT", "DELETE"):
                self.read_body()
            if fault.get("mode") == "reset":
                self.close_connection = True
                entry["status"] = -1
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            if fault.get("mode") == "big_header":
                entry["status"] = 200
                self.send_response(200)
                self.send_header("X-Big", "a" * max(0, int(fault.get("size") or 0) - 9))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                return
            if fault.get("mode") == "body":
                entry["status"] = fault.get("status") or 200
                self.send_json(entry["status"], fault.get("body"))
                return
            if fault.get("mode") == "redirect":
                self.send_response(fault.get("status") or 302)
                if fault.get("location") is not None:
                    self.send_header("Location", fault["location"])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            code = fault.get("status", 500)
            headers = {}
            if fault.get("retry_after") is not None:
                headers["Retry-After"] = str(fault["retry_after"])
            reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                      504: "Timeout"}.get(code, "InternalError")
            self.send_json(code, status_body(code, reason, "injected fault: %d" % code),
                           headers)
            return
        headers = {}
        try:
            body = self.read_body() if method in ("POST", "PUT", "DELETE", "PATCH") else None
            if not self.authed():
                raise ApiError(401, "Unauthorized", "Unauthorized")
            code, out = self.dispatch(method, u.path, q, body)
        except ApiError as e:
            code = e.code
            out = status_body(e.code, e.reason, e.message, e.details)
            headers = e.headers
        if code == "watch":
            entry["status"] = 200
            with st.lock:
                st.requests.append(entry)
            self.stream_watch(*out)
            return
        entry["status"] = code
        with st.lock:  # logged before the answer: a test reading the log sees it
            st.requests.append(entry)
        self.send_json(code, out, headers)

    def stream_watch(self, resource, version, ns, sel, since, timeout):
        st = self.server.state
        store = st.store
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def matches(r, ons, obj):
            return r == resource and (ns is None or ons == ns) and \
                all((get_field(obj, f) == v) == eq for f, eq, v in sel)

        def send(kind, obj):
            data = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        deadline = time.monotonic() + timeout
        try:
            with store.lock:
                if since in ("", "0"):
                    start = store.rv
                    initial = [copy.deepcopy(o) for (r, ons, _n), o in sorted(store.objs.items())
                               if matches(r, ons, o)]
                else:
                    try:
                        start = int(since)
                    except ValueError:
                        start = -1
                    initial = None
            if initial is None and (start < store.first_rv or start > store.rv):
                send("ERROR", status_body(410, "Expired", "too old resource version: %s (%d)"
                                          % (since, store.first_rv)))
                self.wfile.write(b"0\r\n\r\n")
                return
            for o in initial or []:
                send("ADDED", to_version(resource, version, o))
            while not st.down and time.monotonic() < deadline:
                with store.lock:
                    out = [(rv, kind, o) for rv, kind, r, ons, o in store.events
                           if rv > start and matches(r, ons, o)]
                    if out:
                        start = out[-1][0]
                    else:
                        store.cond.wait(0.2)
                for _rv, kind, o in out:
                    send(kind, to_version(resource, version, o))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True

    def dispatch(self, method, path, q, body):
        st = self.server.state
        if path == "/version" and method == "GET":
            return 200, {"major": "1", "minor": str(st.kube_minor),
                         "gitVersion": "v1.%d.0" % st.kube_minor, "platform": "linux/amd64"}
        resource, version, ns, name, sub = route(st, path)
        store = st.store
        one = lambda k: (q.get(k) or [""])[0]  # noqa: E731
        if one("labelSelector"):
            raise ApiError(400, "BadRequest", "labelSelector is not implemented "
                           "by the stand-in API server")
        if one("watch") not in ("", "false", "0"):
            if method != "GET" or name is not None:
                raise ApiError(405, "MethodNotAllowed", "watch is a GET on a collection")
            sel = parse_selector(resource, one("fieldSelector"))
            try:
                timeout = float(one("timeoutSeconds") or 1800)
            except ValueError:
                raise ApiError(400, "BadRequest", "invalid timeoutSeconds")
            return "watch", (resource, version, ns, sel, one("resourceVersion"), timeout)
        if method == "PATCH":
            if name is None or sub:
                raise ApiError(405, "MethodNotAllowed", "PATCH needs a name")
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if ctype not in ("application/merge-patch+json",
                             "application/strategic-merge-patch+json"):
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted "
                               "media types include: application/merge-patch+json, "
                               "application/strategic-merge-patch+json")
            return 200, to_version(resource, version, store.patch(resource, ns, name, body))
        if method == "GET" and name is not None:
            # GET on .../status answers the whole object, as Kubernetes does
            return 200, to_version(resource, version, store.get(resource, ns, name))
        if method == "GET":
            sel = parse_selector(resource, one("fieldSelector"))
            items, rv = store.list(resource, ns, sel)
            start = 0
            if one("continue"):
                try:
                    start = int(one("continue"))
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid continue token")
            limit = int(one("limit") or 0)
            meta = {"resourceVersion": rv}
            if limit > 0 and start + limit < len(items):
                meta["continue"] = str(start + limit)
                meta["remainingItemCount"] = len(items) - start - limit
                page = items[start:start + limit]
            else:
                page = items[start:]
            group = RESOURCES[resource][0]
            out_items = []
            for o in page:
                o = to_version(resource, version, o)
                o.pop("apiVersion", None)
                o.pop("kind", None)
                out_items.append(o)
            return 200, {"kind": RESOURCES[resource][2] + "List",
                         "apiVersion": (group + "/" + version) if group else version,
                         "metadata": meta, "items": out_items}
        if method == "POST":
            if name is not None or ns is None:
                raise ApiError(405, "MethodNotAllowed", "POST is allowed on collections only")
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "POST needs an object body")
            kind = body.get("kind")
            if kind and kind != RESOURCES[resource][2]:
                raise ApiError(400, "BadRequest", "kind %s does not match %s"
                               % (kind, RESOURCES[resource][2]))
            obj = from_version(resource, version, body)
            if resource == "resourceslices":
                validate_slice(st, obj)
            return 201, to_version(resource, version, store.create(resource, ns, obj))
        if method == "PUT":
            if name is None:
                raise ApiError(405, "MethodNotAllowed", "PUT needs a name")
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "PUT needs an object body")
            obj = from_version(resource, version, body)
            if resource == "resourceslices" and not sub:
                validate_slice(st, obj)
            return 200, to_version(resource, version, store.update(resource, ns, name, obj, sub))
        if method == "DELETE" and name is not None:
            pre = (body or {}).get("preconditions") if isinstance(body, dict) else None
            return 200, to_version(resource, version, store.delete(resource, ns, name, pre))
        if method == "DELETE":
            sel = parse_selector(resource, one("fieldSelector"))
            items, _ = store.list(resource, ns, sel)
            out = []
            for o in items:
                try:
                    d = store.delete(resource, o["metadata"].get("namespace", ""),
                                     o["metadata"]["name"], None)
                except ApiError:
                    continue
                d = to_version(resource, version, d)
                d.pop("apiVersion", None)
                d.pop("kind", None)
                out.append(d)
            group = RESOURCES[resource][0]
            return 200, {"kind": RESOURCES[resource][2] + "List",
                         "apiVersion": (group + "/" + version) if group else version,
                         "metadata": {"resourceVersion": str(store.rv)}, "items": out}
        raise ApiError(405, "MethodNotAllowed", "method %s not allowed" % method)

    def do_GET(self):
        self.handle_api("GET")

    def do_POST(self):
        self.handle_api("POST")

    def do_PUT(self):
        self.handle_api("PUT")

    def do_DELETE(self):
        self.handle_api("DELETE")

    def do_PATCH(self):
        self.handle_api("PATCH")


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, state):
        self.state = state
        super().__init__(addr, ApiHandler)

    def finish_request(self, request, client_address):
        if self.state.ssl_ctx is not None:
            try:
                request.settimeout(30)
                request = self.state.ssl_ctx.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (ssl.SSLError, OSError) as e:
                if self.state.args.verbose:
                    sys.stderr.write("kubeapi: TLS handshake failed: %s\n" % e)
                return
        with self.state.lock:
            self.state.conns.add(request)
        try:
            super().finish_request(request, client_address)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. while its request was held by a delay)
        finally:
            with self.state.lock:
                self.state.conns.discard(request)


class AdminHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one request costs no 40 ms delayed ACK

    def log_message(self, fmt, *a):
        pass

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self):
        st = self.server.state
        if self.path == "/_admin/requests":
            with st.lock:
                self.send_json(200, {"items": list(st.requests)})
        elif self.path == "/_admin/delay":
            with st.lock:
                self.send_json(200, {"waiting": st.waiting, "delays": list(st.delays)})
        elif self.path == "/_admin/objects":
            with st.store.lock:
                self.send_json(200, {"items": [copy.deepcopy(o) for _, o in
                                               sorted(st.store.objs.items())]})
        else:
            self.send_json(404, {"error": "unknown admin path"})

    def do_DELETE(self):
        st = self.server.state
        if self.path == "/_admin/requests":
            with st.lock:
                st.requests.clear()
        elif self.path == "/_admin/faults":
            with st.lock:
                st.faults.clear()
        elif self.path == "/_admin/delay":
            with st.lock:
                st.delays.clear()
                st.delay_gen += 1
                st.delay_cond.notify_all()
        else:
            self.send_json(404, {"error": "unknown admin path"})
            return
        self.send_json(200, {})

    def do_POST(self):
        st = self.server.state
        try:
            b = self.body()
            if self.path == "/_admin/objects":
                kind = b.get("kind")
                if kind not in KIND_TO_RESOURCE:
                    raise ValueError("unknown kind %r" % kind)
                resource = KIND_TO_RESOURCE[kind]
                version = (b.get("apiVersion") or "v1").split("/")[-1]
                obj = from_version(resource, version, b)
                ns = "" if RESOURCES[resource][1] else \
                    (obj.get("metadata") or {}).get("namespace", "default")
                self.send_json(201, st.store.seed(resource, ns, obj))
            elif self.path == "/_admin/faults":
                f = {"status": int(b.get("status", 200 if b.get("mode") == "body" else 500)), "count": int(b.get("count", 1)),
                     "method": b.get("method"), "path": b.get("path"),
                     "retry_after": b.get("retry_after"), "mode": b.get("mode", "status"),
                     "size": b.get("size"), "location": b.get("location"),
                     "body": b.get("body")}
                with st.lock:
                    st.faults.append(f)
                self.send_json(200, f)
            elif self.path == "/_admin/delay":
                d = {"seconds": float(b.get("seconds", 5)), "method": b.get("method"),
                     "path": b.get("path")}
                with st.lock:
                    st.delays.append(d)
                self.send_json(200, d)
            elif self.path == "/_admin/down":
                api_down(st)
                if b.get("seconds") is not None:
                    st.timer = threading.Timer(float(b["seconds"]), api_up, (st,))
                    st.timer.daemon = True
                    st.timer.start()
                self.send_json(200, {"down": True})
            elif self.path == "/_admin/up":
                api_up(st)
                self.send_json(200, {"down": False})
            elif self.path == "/_admin/token":
                with st.lock:
                    st.token = b.get("token")
                self.send_json(200, {})
            else:
                self.send_json(404, {"error": "unknown admin path"})
        except (ValueError, KeyError, TypeError, OSError) as e:
            self.send_json(400, {"error": str(e)})


def api_up(st):
    with st.lock:
        if st.api is not None:
            return
        srv = None
        for _ in range(200):  # the port may linger briefly after close
            try:
                srv = ApiServer(("127.0.0.1", st.port), st)
                break
            except OSError:
                time.sleep(0.05)
        if srv is None:
            raise OSError("cannot re-bind port %d" % st.port)
        st.port = srv.server_address[1]
        st.api = srv
        st.down = False
        st.api_thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                                         daemon=True)
        st.api_thread.start()


def api_down(st):
    with st.lock:
        srv = st.api
        st.api = None
        st.down = True
    if srv is not None:
        srv.shutdown()
        srv.server_close()
    with st.lock:
        conns = list(st.conns)
    for c in conns:  # a crashed server drops its connections too
        try:
            c.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def make_certs(d):
    """Self-signed CA, server cert for 127.0.0.1/localhost, client cert; EC keys
    (fast). Returns the paths."""
    os.makedirs(d, exist_ok=True)
    p = {k: os.path.join(d, k) for k in ("ca.key", "ca.crt", "server.key", "server.csr",
                                          "server.crt", "client.key", "client.csr",
                                          "client.crt", "ext.cnf")}
    if os.path.exists(p["client.crt"]):
        return p

    def run(*a):
        subprocess.run(["openssl"] + list(a), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", p["ca.key"], "-out", p["ca.crt"], "-days", "2",
        "-subj", "/CN=kdev-test-ca")
    with open(p["ext.cnf"], "w") as f:
        f.write("[srv]\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                "[cli]\nextendedKeyUsage=clientAuth\n")
    run("req", *ec, "-keyout", p["server.key"], "-out", p["server.csr"], "-subj", "/CN=kubeapi")
    run("x509", "-req", "-in", p["server.csr"], "-CA", p["ca.crt"], "-CAkey", p["ca.key"],
        "-CAcreateserial", "-out", p["server.crt"], "-days", "2", "-extfile", p["ext.cnf"],
        "-extensions", "srv")
    run("req", *ec, "-keyout", p["client.key"], "-out", p["client.csr"],
        "-subj", "/O=system:nodes/CN=kdev-test")
    run("x509", "-req", "-in", p["client.csr"], "-CA", p["ca.crt"], "-CAkey", p["ca.key"],
        "-CAcreateserial", "-out", p["client.crt"], "-days", "2", "-extfile", p["ext.cnf"],
        "-extensions", "cli")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--token", help="bearer token to require")
    ap.add_argument("--tls", metavar="DIR", help="serve HTTPS with a test CA made in DIR")
    ap.add_argument("--client-cert-auth", action="store_true",
                    help="with --tls and no --token: require a client certificate")
    ap.add_argument("--versions", default="v1,v1beta1", help="served resource.k8s.io versions")
    ap.add_argument("--kube-version", default="1.35",
                    help="Kubernetes version GET /version answers (1.<minor>); 1.35+ "
                    "refuses slices with both devices and sharedCounters")
    ap.add_argument("--seed", help="JSON file: a list of objects to store at start")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    st = State(args)
    info = {"ca": None, "client_cert": None, "client_key": None}
    if args.tls:
        p = make_certs(args.tls)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(p["server.crt"], p["server.key"])
        ctx.load_verify_locations(p["ca.crt"])
        ctx.verify_mode = ssl.CERT_OPTIONAL
        st.ssl_ctx = ctx
        info = {"ca": p["ca.crt"], "client_cert": p["client.crt"],
                "client_key": p["client.key"]}
    if args.seed:
        with open(args.seed) as f:
            for b in json.load(f):
                resource = KIND_TO_RESOURCE[b["kind"]]
                version = (b.get("apiVersion") or "v1").split("/")[-1]
                obj = from_version(resource, version, b)
                ns = "" if RESOURCES[resource][1] else \
                    (obj.get("metadata") or {}).get("namespace", "default")
                st.store.seed(resource, ns, obj)
    st.port = args.port
    api_up(st)
    admin = ThreadingHTTPServer(("127.0.0.1", 0), AdminHandler)
    admin.daemon_threads = True
    admin.state = st
    threading.Thread(target=admin.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()

    info.update({"port": st.port, "admin_port": admin.server_address[1],
                 "url": "%s://127.0.0.1:%d" % ("https" if args.tls else "http", st.port),
                 "admin_url": "http://127.0.0.1:%d" % admin.server_address[1]})
    sys.stdout.write(json.dumps(info) + "\n")
    sys.stdout.flush()

    done = threading.Event()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # tests dump a hung server
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except (OSError, ValueError):
            pass
        done.set()

    if not sys.stdin.isatty():
        threading.Thread(target=watch_stdin, daemon=True).start()
    while not done.wait(0.2):
        pass
    os._exit(0)


if __name__ == "__main__":
    main()

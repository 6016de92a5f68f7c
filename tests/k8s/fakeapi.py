#!/usr/bin/env python3
"""A loopback fake of the Kubernetes API server for nrm's tests.

It serves, over HTTPS on 127.0.0.1, the parts of the API that nrm uses, with
the semantics of a Kubernetes 1.36 kube-apiserver:

  GET    /api/v1/nodes/{name}
  GET    /apis/resource.k8s.io/v1/resourceclaims                      list, or watch with ?watch=1
  GET    /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims      list, or watch with ?watch=1
  GET, PATCH /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}   merge, strategic or JSON patch
  GET, PUT, PATCH .../namespaces/{ns}/resourceclaims/{name}/status   server-side apply of status.devices
  GET    /apis/resource.k8s.io/v1/resourceslices            list, or watch with ?watch=1
  POST   /apis/resource.k8s.io/v1/resourceslices            create
  DELETE /apis/resource.k8s.io/v1/resourceslices            delete a collection
  GET, PUT, PATCH, DELETE /apis/resource.k8s.io/v1/resourceslices/{name}
  POST   /apis/coordination.k8s.io/v1/namespaces/{ns}/leases
  GET, PUT, DELETE /apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}
  GET    /version, /healthz, /readyz, /livez, /api, /apis, /apis/{group}, /apis/{group}/v1

Bearer tokens, resourceVersions and optimistic concurrency, generateName,
field and label selectors, paging, watch history with bookmarks and 410
Expired, ResourceSlice validation with the real field paths and messages,
feature gates that drop fields, defaulting, and quantities rendered in
canonical form ("1024Mi" comes back as "1Gi") all behave as in a real server.
So do, for ResourceClaims, label-selected watches (a claim that starts or
stops matching arrives as ADDED or DELETED), the status.devices validation,
and the 1.36 authorization of status writes: a token may carry an identity
(a ServiceAccount, a node-name extra) and RBAC rules, and a status.devices
change then needs resourceclaims/driver with associated-node:VERB (the node
agent of the claim's node) or arbitrary-node:VERB for that driver.

From a test:

    api = FakeAPI(workdir, tokens=["t0"])   # or a table: see FakeAPI.__init__
    api.start()
    api.add_node("worker-1")
    api.put_claim({...})                       # get_claim, claims, modify_claim,
                                               # update_claim_status, delete_claim
    api.write_kubeconfig(os.path.join(workdir, "kubeconfig"))
    ... run nrm ...
    assert api.wait_for(lambda: len(api.slices()) == 2)
    api.stop()

`fakeapi.py --selftest` checks the server against itself; `fakeapi.py
--serve DIR` runs it in the foreground and writes DIR/kubeconfig.
Set FAKEAPI_DEBUG=1 to log every request on stderr.
"""

import argparse
import base64
import collections
import copy
import datetime
import fractions
import gzip
import hmac
import http.client
import http.server
import json
import math
import os
import queue
import random
import re
import secrets
import select
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid

GROUP = "resource.k8s.io"
API_VERSION = GROUP + "/v1"
SLICE_KIND = "ResourceSlice"
SLICES = "resourceslices"
CLAIM_KIND = "ResourceClaim"
CLAIMS = "resourceclaims"
COORDINATION = "coordination.k8s.io"
LEASE_KIND = "Lease"
LEASES = "leases"

# Feature gates of a 1.36 kube-apiserver that change what a ResourceSlice may hold
# or who may write a ResourceClaim's status.
DEFAULT_GATES = {
    "DRAPartitionableDevices": True,
    "DRADeviceTaints": True,
    "DRADeviceBindingConditions": True,
    "DRAConsumableCapacity": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAListTypeAttributes": False,
    "DRANodeAllocatableResources": False,
    "DRAResourceClaimGranularStatusAuthorization": True,
}

MAX_BODY = 3 * 1024 * 1024  # the apiserver's request body limit
GZIP_MIN = 128 * 1024  # responses this large are compressed for a client that accepts gzip
MAX_INT64 = 2**63 - 1
DEBUG = os.environ.get("FAKEAPI_DEBUG") == "1"


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def _timestamp(dt=None):
    return (dt or _now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def _truthy(value):
    """A boolean query parameter, as Go's strconv.ParseBool reads it."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _no_constant(name):
    raise ValueError("invalid character '%s' looking for beginning of value" % name[0])


def _loads(data):
    """json.loads without NaN and Infinity, which Go's decoder refuses."""
    return json.loads(data, parse_constant=_no_constant)


# ---------------------------------------------------------------------------
# API errors: every failure is answered with a metav1.Status body.

_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 406: "NotAcceptable", 409: "Conflict", 410: "Expired",
    413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
    429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}

# What fail_next() answers, worded as the real server words these failures.
_INJECTED_MESSAGES = {
    400: "the server rejected our request for an unknown reason",
    401: "Unauthorized",
    403: "forbidden: the test refused this request",
    404: "the server could not find the requested resource",
    409: "the server reported a conflict",
    410: "the resource has expired",
    422: "the server rejected our request due to an error in our request",
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected by the test",
    503: "the server is currently unable to handle the request",
    504: "Timeout: request did not complete within the allotted timeout",
}

OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"


class APIError(Exception):
    """An HTTP error with a Kubernetes Status body."""

    def __init__(self, code, message, reason=None, details=None, headers=()):
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else _REASONS.get(code, "")
        self.details = details
        self.headers = list(headers)

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason}
        if self.details is not None:
            s["details"] = self.details
        s["code"] = self.code
        return s


def _details(name, resource, group=GROUP):
    d = {"name": name}
    if group:
        d["group"] = group
    d["kind"] = resource
    return d


def _qualified(resource, group=GROUP):
    return resource + "." + group if group else resource


def _not_found(name, resource=SLICES, group=GROUP):
    return APIError(404, '%s "%s" not found' % (_qualified(resource, group), name),
                    details=_details(name, resource, group))


def _already_exists(name, resource=SLICES, group=GROUP):
    return APIError(409, '%s "%s" already exists' % (_qualified(resource, group), name),
                    reason="AlreadyExists", details=_details(name, resource, group))


def _conflict(name, why=OPTIMISTIC_LOCK, resource=SLICES, group=GROUP):
    return APIError(409, 'Operation cannot be fulfilled on %s "%s": %s' % (_qualified(resource, group), name, why),
                    details=_details(name, resource, group))


def _bad_request(message):
    return APIError(400, message)


def _cannot_handle(why, kind=SLICE_KIND):
    return _bad_request('%s in version "v1" cannot be handled as a %s: %s' % (kind, kind, why))


# ---------------------------------------------------------------------------
# Field errors, rendered as k8s.io/apimachinery/pkg/util/validation/field does.

_OMIT = object()
_FIELD_TYPES = {
    "required": ("Required value", "FieldValueRequired"),
    "invalid": ("Invalid value", "FieldValueInvalid"),
    "forbidden": ("Forbidden", "FieldValueForbidden"),
    "toolong": ("Too long", "FieldValueTooLong"),
    "toomany": ("Too many", "FieldValueTooMany"),
    "duplicate": ("Duplicate value", "FieldValueDuplicate"),
    "notsupported": ("Unsupported value", "FieldValueNotSupported"),
    "notfound": ("Not found", "FieldValueNotFound"),
}


class _Shown(str):
    """A bad value that Go prints through its String() method: as is, without quotes."""


def _go_value(v):
    if isinstance(v, _Shown):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        return "null"
    return _dumps(v)


class FieldError:
    def __init__(self, kind, field, value=_OMIT, detail=""):
        self.kind, self.field, self.value, self.detail = kind, field, value, detail

    def body(self):
        label = _FIELD_TYPES[self.kind][0]
        if self.kind in ("required", "forbidden", "toolong") or self.value is _OMIT:
            s = label
        else:
            s = label + ": " + _go_value(self.value)
        if self.detail:
            s += ": " + self.detail
        return s

    def __str__(self):
        return "%s: %s" % (self.field, self.body())


def _required(f, detail=""):
    return FieldError("required", f, detail=detail)


def _invalid(f, value, detail):
    return FieldError("invalid", f, value, detail)


def _forbidden(f, detail):
    return FieldError("forbidden", f, detail=detail)


def _too_long(f, limit):
    return FieldError("toolong", f, detail="may not be more than %d bytes" % limit)


def _too_many(f, n, limit):
    return FieldError("toomany", f, n, "must have at most %d items" % limit)


def _duplicate(f, value):
    return FieldError("duplicate", f, value)


def _not_supported(f, value, supported):
    return FieldError("notsupported", f, value, "supported values: " + ", ".join(json.dumps(s) for s in supported))


def _invalid_error(name, errs, kind=SLICE_KIND, group=GROUP):
    """The 422 for a list of field errors, as apierrors.NewInvalid builds it."""
    msgs = []
    for e in errs:
        if str(e) not in msgs:
            msgs.append(str(e))
    agg = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    causes = [{"reason": _FIELD_TYPES[e.kind][1], "message": e.body(), "field": e.field} for e in errs]
    details = {"name": name, "group": group, "kind": kind, "causes": causes}
    return APIError(422, '%s "%s" is invalid: %s' % (_qualified(kind, group), name, agg), details=details)


# ---------------------------------------------------------------------------
# Name formats (k8s.io/apimachinery/pkg/util/validation).

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile("^" + _LABEL + "$")
_DNS_SUBDOMAIN_RE = re.compile("^" + _LABEL + r"(\." + _LABEL + ")*$")
_C_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QNAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_SEMVER_NUM = r"(0|[1-9]\d*)"
_SEMVER_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER_RE = re.compile("^" + _SEMVER_NUM + r"\." + _SEMVER_NUM + r"\." + _SEMVER_NUM
                        + r"(-" + _SEMVER_PRE + r"(\." + _SEMVER_PRE + r")*)?"
                        + r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$")

_DNS_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                  "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_DNS_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                      "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                      "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_C_ID_MSG = ("a valid C identifier must start with alphabetic character or '_', followed by a string of "
             "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
             "validation is '[A-Za-z_][A-Za-z0-9_]*')")
_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
              "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def _dns_label_msgs(s):
    msgs = []
    if len(s) > 63:
        msgs.append("must be no more than 63 characters")
    if not _DNS_LABEL_RE.match(s):
        msgs.append(_DNS_LABEL_MSG)
    return msgs


def _dns_subdomain_msgs(s):
    msgs = []
    if len(s) > 253:
        msgs.append("must be no more than 253 characters")
    if not _DNS_SUBDOMAIN_RE.match(s):
        msgs.append(_DNS_SUBDOMAIN_MSG)
    return msgs


def _qualified_name_msgs(s):
    """IsQualifiedName: label keys, taint keys, condition types."""
    parts = s.split("/")
    if len(parts) == 1:
        name = parts[0]
        msgs = []
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            msgs = ["prefix part must be non-empty"]
        else:
            msgs = ["prefix part " + m for m in _dns_subdomain_msgs(prefix)]
    else:
        return ["a qualified name " + _QNAME_MSG + " with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    if not name:
        msgs.append("name part must be non-empty")
    elif len(name) > 63:
        msgs.append("name part must be no more than 63 characters")
    if not _QNAME_RE.match(name):
        msgs.append("name part " + _QNAME_MSG)
    return msgs


def _label_value_msgs(s):
    msgs = []
    if len(s) > 63:
        msgs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(s):
        msgs.append(_LABEL_VALUE_MSG)
    return msgs


# ---------------------------------------------------------------------------
# Quantities (k8s.io/apimachinery/pkg/api/resource): exact values and the
# canonical form the server writes back.

QUANTITY_FORMAT_ERROR = ("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
_QTY_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)$")
_DEC_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_BY_EXP = {e: s for s, e in _DEC_SUFFIXES.items()}
_BIN_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BIN_BY_POWER = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def parse_quantity(s):
    """Returns (value as a Fraction, format) or raises ValueError with the apiserver's message."""
    if not isinstance(s, str) or not s:
        raise ValueError(QUANTITY_FORMAT_ERROR)
    if s == "0":
        return fractions.Fraction(0), "DecimalSI"
    m = _QTY_RE.match(s)
    if not m or not (m.group(2) or m.group(3)):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if suffix in _DEC_SUFFIXES:
        base, exp, fmt = 10, _DEC_SUFFIXES[suffix], "DecimalSI"
    elif suffix in _BIN_SUFFIXES:
        base, exp, fmt = 2, _BIN_SUFFIXES[suffix], "BinarySI"
    elif len(suffix) > 1 and suffix[0] in "eE" and re.match(r"^[-+]?[0-9]+$", suffix[1:]):
        base, exp, fmt = 10, int(suffix[1:]), "DecimalExponent"
        if abs(exp) > 400:  # keep exact arithmetic cheap; no real quantity is this large
            raise ValueError("unable to parse numeric part of quantity")
    else:
        raise ValueError("unable to parse quantity's suffix")
    v = fractions.Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    v *= fractions.Fraction(base) ** exp
    # Precision below 1n rounds up, so that a request never becomes zero.
    scaled = v * 10**9
    if scaled.denominator != 1:
        v = fractions.Fraction(math.ceil(scaled), 10**9)
    if fmt == "BinarySI" and v > MAX_INT64:
        v = fractions.Fraction(MAX_INT64)
    if fmt == "BinarySI" and 0 < v < 1:
        fmt = "DecimalSI"
    return (-v if sign == "-" else v), fmt


def format_quantity(v, fmt):
    """The canonical string of a quantity: no fraction digits, the largest suffix that loses nothing."""
    if v == 0:
        return "0"
    if fmt == "BinarySI" and (-1024 < v < 1024 or v.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        n, power = int(v), 0
        while power < 6 and n % 1024 == 0:
            n //= 1024
            power += 1
        return "%d%s" % (n, _BIN_BY_POWER[power])
    n, exp = math.ceil(v * 10**9), -9
    while n % 10 == 0:
        n //= 10
        exp += 1
    while exp % 3:
        n *= 10
        exp -= 1
    if fmt == "DecimalExponent":
        return "%d%s" % (n, "e%d" % exp if exp else "")
    if exp > 18:
        n *= 10 ** (exp - 18)
        exp = 18
    return "%d%s" % (n, _DEC_BY_EXP[exp])


def canonical_quantity(s):
    return format_quantity(*parse_quantity(s))


def _qv(s):
    return parse_quantity(s)[0]


# ---------------------------------------------------------------------------
# The ResourceSlice schema, in Go declaration order (which is the JSON field
# order the server writes). Each field has an omit rule: "always" (no
# omitempty: written even when zero), "empty" (omitempty on a value: zero,
# empty lists and maps are left out) or "nil" (omitempty on a pointer: only an
# unset field is left out; false and "" stay).

STR, INT, BOOL, QTY, TIME, MTIME, ANY = "string", "int64", "bool", "Quantity", "Time", "MicroTime", "any"


def _list(t):
    return ("list", t)


def _map(t):
    return ("map", t)


def _obj(go_name, /, **fields):
    return ("obj", go_name, fields)


_NODE_SELECTOR_REQ = _obj("NodeSelectorRequirement", key=(STR, "always"), operator=(STR, "always"),
                          values=(_list(STR), "empty"))
_NODE_SELECTOR = _obj("NodeSelector", nodeSelectorTerms=(_list(_obj(
    "NodeSelectorTerm", matchExpressions=(_list(_NODE_SELECTOR_REQ), "empty"),
    matchFields=(_list(_NODE_SELECTOR_REQ), "empty"))), "always"))
_COUNTER = _obj("Counter", value=(QTY, "always"))
_ATTRIBUTE = _obj("DeviceAttribute", int=(INT, "nil"), bool=(BOOL, "nil"), string=(STR, "nil"),
                  version=(STR, "nil"), ints=(_list(INT), "empty"), bools=(_list(BOOL), "empty"),
                  strings=(_list(STR), "empty"), versions=(_list(STR), "empty"))
_POLICY = _obj("CapacityRequestPolicy", default=(QTY, "nil"), validValues=(_list(QTY), "empty"),
               validRange=(_obj("CapacityRequestPolicyRange", min=(QTY, "nil"), max=(QTY, "nil"),
                                step=(QTY, "nil")), "nil"))
_CAPACITY = _obj("DeviceCapacity", value=(QTY, "always"), requestPolicy=(_POLICY, "nil"))
_TAINT = _obj("DeviceTaint", key=(STR, "always"), value=(STR, "empty"), effect=(STR, "always"),
              timeAdded=(TIME, "nil"))
_CONSUMPTION = _obj("DeviceCounterConsumption", counterSet=(STR, "always"), counters=(_map(_COUNTER), "empty"))
_MAPPING = _obj("NodeAllocatableResourceMapping", capacityKey=(STR, "nil"), allocationMultiplier=(QTY, "nil"))
_DEVICE = _obj(
    "Device",
    name=(STR, "always"),
    attributes=(_map(_ATTRIBUTE), "empty"),
    capacity=(_map(_CAPACITY), "empty"),
    consumesCounters=(_list(_CONSUMPTION), "empty"),
    nodeName=(STR, "nil"),
    nodeSelector=(_NODE_SELECTOR, "nil"),
    allNodes=(BOOL, "nil"),
    taints=(_list(_TAINT), "empty"),
    bindsToNode=(BOOL, "nil"),
    bindingConditions=(_list(STR), "empty"),
    bindingFailureConditions=(_list(STR), "empty"),
    allowMultipleAllocations=(BOOL, "nil"),
    nodeAllocatableResourceMappings=(_map(_MAPPING), "empty"),
)
_SPEC = _obj(
    "ResourceSliceSpec",
    driver=(STR, "always"),
    pool=(_obj("ResourcePool", name=(STR, "always"), generation=(INT, "always"),
               resourceSliceCount=(INT, "always")), "always"),
    nodeName=(STR, "nil"),
    nodeSelector=(_NODE_SELECTOR, "nil"),
    allNodes=(BOOL, "nil"),
    devices=(_list(_DEVICE), "empty"),
    perDeviceNodeSelection=(BOOL, "nil"),
    sharedCounters=(_list(_obj("CounterSet", name=(STR, "always"), counters=(_map(_COUNTER), "empty"))), "empty"),
)
_OWNER_REF = _obj("OwnerReference", apiVersion=(STR, "always"), kind=(STR, "always"), name=(STR, "always"),
                  uid=(STR, "always"), controller=(BOOL, "nil"), blockOwnerDeletion=(BOOL, "nil"))
_META = _obj(
    "ObjectMeta",
    name=(STR, "empty"), generateName=(STR, "empty"), namespace=(STR, "empty"), selfLink=(STR, "empty"),
    uid=(STR, "empty"), resourceVersion=(STR, "empty"), generation=(INT, "empty"),
    creationTimestamp=(TIME, "always"), deletionTimestamp=(TIME, "nil"),
    deletionGracePeriodSeconds=(INT, "nil"), labels=(_map(STR), "empty"), annotations=(_map(STR), "empty"),
    ownerReferences=(_list(_OWNER_REF), "empty"), finalizers=(_list(STR), "empty"),
    managedFields=(_list(ANY), "empty"),
)
_SLICE = _obj("ResourceSlice", apiVersion=(STR, "empty"), kind=(STR, "empty"), metadata=(_META, "always"),
              spec=(_SPEC, "always"))
# metav1.Condition: a zero lastTransitionTime is written as null, message always.
_CONDITION = _obj("Condition", type=(STR, "always"), status=(STR, "always"), observedGeneration=(INT, "empty"),
                  lastTransitionTime=(TIME, "always"), reason=(STR, "always"), message=(STR, "always"))
_NETWORK_DATA = _obj("NetworkDeviceData", interfaceName=(STR, "empty"), ips=(_list(STR), "empty"),
                     hardwareAddress=(STR, "empty"))
# AllocatedDeviceStatus: conditions has no omitempty, so an entry without any says "conditions": null.
_DEVICE_STATUS = _obj("AllocatedDeviceStatus", driver=(STR, "always"), pool=(STR, "always"),
                      device=(STR, "always"), shareID=(STR, "nil"), conditions=(_list(_CONDITION), "always"),
                      data=(ANY, "nil"), networkData=(_NETWORK_DATA, "nil"))
_LEASE_SPEC = _obj("LeaseSpec", holderIdentity=(STR, "nil"), leaseDurationSeconds=(INT, "nil"),
                   acquireTime=(MTIME, "nil"), renewTime=(MTIME, "nil"), leaseTransitions=(INT, "nil"),
                   strategy=(STR, "nil"), preferredHolder=(STR, "nil"))
_LEASE = _obj("Lease", apiVersion=(STR, "empty"), kind=(STR, "empty"), metadata=(_META, "always"),
              spec=(_LEASE_SPEC, "always"))

_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_GO_TYPES = {STR: "string", INT: "int64", BOOL: "bool", QTY: "resource.Quantity", TIME: "v1.Time",
             MTIME: "v1.MicroTime"}


def _kind(schema):
    return schema if isinstance(schema, str) else schema[0]


def _json_type(v):
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "bool"
    return "number"


def _go_type(schema):
    k = _kind(schema)
    if k == "list":
        return "[]" + _go_type(schema[1])
    if k == "map":
        return "map[string]" + _go_type(schema[1])
    if k == "obj":
        return "v1." + schema[1]
    return _GO_TYPES.get(k, "interface {}")


class _Decoder:
    """Decodes a request body as the apiserver's JSON decoder does: type checks,
    unknown fields dropped (and reported), null as unset, quantities parsed,
    timestamps normalized. Empty lists and maps are kept, as Go keeps them
    non-nil, until encoding leaves them out."""

    def __init__(self, kind=SLICE_KIND):
        self.unknown = []
        self.kind = kind

    def decode(self, schema, value, path):
        k = _kind(schema)
        if k == ANY:
            return copy.deepcopy(value)
        if k == STR:
            if not isinstance(value, str):
                self._type_error(value, schema, path)
            return value
        if k == INT:
            if not isinstance(value, int) or isinstance(value, bool) or not -MAX_INT64 - 1 <= value <= MAX_INT64:
                self._type_error(value, schema, path)
            return value
        if k == BOOL:
            if not isinstance(value, bool):
                self._type_error(value, schema, path)
            return value
        if k == QTY:
            # A JSON number is accepted too, as Quantity.UnmarshalJSON does.
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                self._type_error(value, schema, path)
            try:
                return canonical_quantity(value.strip() if isinstance(value, str) else repr(value))
            except ValueError as e:
                raise _cannot_handle(str(e), self.kind)
        if k in (TIME, MTIME):
            if not isinstance(value, str) or not _TIME_RE.match(value):
                raise _cannot_handle('parsing time "%s" as "2006-01-02T15:04:05Z07:00": cannot parse' % value,
                                     self.kind)
            dt = datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
            dt = dt.astimezone(datetime.timezone.utc)
            if k == MTIME:  # metav1.MicroTime: RFC 3339 with six fractional digits
                return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            return _timestamp(dt.replace(microsecond=0))
        if k == "list":
            if not isinstance(value, list):
                self._type_error(value, schema, path)
            return [self._element(schema[1], v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
        if k == "map":
            if not isinstance(value, dict):
                self._type_error(value, schema, path)
            return {key: self._element(schema[1], v, "%s[%s]" % (path, key)) for key, v in value.items()}
        if not isinstance(value, dict):
            self._type_error(value, schema, path)
        out = {}
        fields = schema[2]
        for key, v in value.items():
            sub = "%s.%s" % (path, key) if path else key
            if key not in fields:
                self.unknown.append(sub)
                continue
            if v is None:
                continue
            fs, omit = fields[key]
            d = self.decode(fs, v, sub)
            if omit == "empty" and _kind(fs) in (STR, INT, BOOL) and not d:
                continue
            out[key] = d
        for key, (fs, omit) in fields.items():
            if omit == "always" and key not in out:
                out[key] = self._zero(fs)
        return out

    def _element(self, schema, v, path):
        return self._zero(schema) if v is None else self.decode(schema, v, path)

    def _zero(self, schema):
        k = _kind(schema)
        if k == "obj":
            return self.decode(schema, {}, "")
        return {STR: "", INT: 0, BOOL: False, QTY: "0"}.get(k)

    def _type_error(self, value, schema, path):
        where = re.sub(r"\[[^\]]*\]", "", path)
        raise _cannot_handle("json: cannot unmarshal %s into Go struct field %s of type %s"
                             % (_json_type(value), self.kind + "." + where if where else self.kind,
                                _go_type(schema)), self.kind)


def _is_empty(v):
    if v is None or v is False or v == "":
        return True
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v == 0
    return isinstance(v, (list, dict)) and not v


def _encode(schema, v):
    k = _kind(schema)
    if v is None:
        return None
    if k == "obj":
        out = {}
        for key, (fs, omit) in schema[2].items():
            x = v.get(key)
            if x is None:
                if omit == "always":
                    out[key] = _encode(fs, _Decoder()._zero(fs))
                continue
            if omit == "empty" and _is_empty(x):
                continue
            out[key] = _encode(fs, x)
        return out
    if k == "list":
        return [_encode(schema[1], x) for x in v]
    if k == "map":
        return {key: _encode(schema[1], v[key]) for key in sorted(v)}
    return copy.deepcopy(v)


def _decode_slice(body, strict=False):
    """(internal object, warnings) of a ResourceSlice request body; raises 400 as the apiserver does."""
    if not isinstance(body, dict):
        raise _cannot_handle("json: cannot unmarshal %s into Go value of type struct" % _json_type(body))
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version not in (None, "", API_VERSION):
        raise _bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                           % (api_version, API_VERSION))
    if kind not in (None, "", SLICE_KIND):
        raise _cannot_handle('no kind "%s" is registered for version "%s"' % (kind, API_VERSION))
    dec = _Decoder()
    obj = dec.decode(_SLICE, body, "")
    warnings = ['unknown field "%s"' % f for f in dec.unknown]
    if strict and warnings:
        raise _cannot_handle("strict decoding error: " + ", ".join(warnings))
    obj["apiVersion"], obj["kind"] = API_VERSION, SLICE_KIND
    # Defaulting (pkg/apis/resource/v1/defaults.go).
    for dev in obj["spec"].get("devices") or []:
        for taint in dev.get("taints") or []:
            taint.setdefault("timeAdded", _timestamp())
        for mapping in (dev.get("nodeAllocatableResourceMappings") or {}).values():
            mapping.setdefault("allocationMultiplier", "1")
    return obj, warnings


def _encode_slice(obj):
    return _encode(_SLICE, obj)


# ---------------------------------------------------------------------------
# Feature gates: fields of a disabled feature are dropped, unless the stored
# object already uses that feature (pkg/registry/resource/resourceslice/strategy.go).

def _devices(spec):
    return (spec or {}).get("devices") or []


def _taints_in_use(spec):
    return any(d.get("taints") for d in _devices(spec))


def _partitionable_in_use(spec):
    if spec.get("sharedCounters") or spec.get("perDeviceNodeSelection") is not None:
        return True
    return any(d.get("consumesCounters") or any(d.get(k) is not None for k in ("nodeName", "nodeSelector", "allNodes"))
               for d in _devices(spec))


def _binding_in_use(spec):
    return any(d.get("bindingConditions") or d.get("bindingFailureConditions") or d.get("bindsToNode") is not None
               for d in _devices(spec))


def _consumable_in_use(spec):
    return any(d.get("allowMultipleAllocations") is not None
               or any(c.get("requestPolicy") is not None for c in (d.get("capacity") or {}).values())
               for d in _devices(spec))


def _allocatable_in_use(spec):
    return any(d.get("nodeAllocatableResourceMappings") for d in _devices(spec))


_LIST_KEYS = ("bools", "ints", "strings", "versions")


def _list_attributes_in_use(spec):
    return any(a.get(k) is not None for d in _devices(spec) for a in (d.get("attributes") or {}).values()
               for k in _LIST_KEYS)


def _drop_disabled(spec, old_spec, gates):
    def keep(gate_on, in_use):
        return gate_on or (old_spec is not None and in_use(old_spec))

    devices = _devices(spec)
    if not keep(gates["DRADeviceTaints"], _taints_in_use):
        for d in devices:
            d.pop("taints", None)
    if not keep(gates["DRAPartitionableDevices"], _partitionable_in_use):
        spec.pop("sharedCounters", None)
        spec.pop("perDeviceNodeSelection", None)
        for d in devices:
            for k in ("consumesCounters", "nodeName", "nodeSelector", "allNodes"):
                d.pop(k, None)
    if not keep(gates["DRADeviceBindingConditions"] and gates["DRAResourceClaimDeviceStatus"], _binding_in_use):
        for d in devices:
            for k in ("bindingConditions", "bindingFailureConditions", "bindsToNode"):
                d.pop(k, None)
    if not keep(gates["DRAConsumableCapacity"], _consumable_in_use):
        for d in devices:
            d.pop("allowMultipleAllocations", None)
            for c in (d.get("capacity") or {}).values():
                c.pop("requestPolicy", None)
    if not keep(gates["DRANodeAllocatableResources"], _allocatable_in_use):
        for d in devices:
            d.pop("nodeAllocatableResourceMappings", None)
    # The list values go, the attribute entry stays (and then fails validation
    # for having no value), exactly as the real strategy does it.
    if not keep(gates["DRAListTypeAttributes"], _list_attributes_in_use):
        for d in devices:
            for a in (d.get("attributes") or {}).values():
                for k in _LIST_KEYS:
                    a.pop(k, None)


# ---------------------------------------------------------------------------
# Validation (pkg/apis/resource/validation/validation.go, ResourceSlice part).

MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_ATTRS_AND_CAPS = 32
MAX_ATTR_VALUES = 48
MAX_ATTR_STRING = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS = 32
MAX_CONSUMPTIONS = 2
MAX_TAINTS = 16
MAX_BINDING_CONDITIONS = 4
MAX_VALID_VALUES = 10
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "None"]


def _check_dns_label(value, path, errs):
    for m in _dns_label_msgs(value):
        errs.append(_invalid(path, value, m))


def _check_driver(name, path, errs):
    if not name:
        errs.append(_required(path))
        return
    if len(name) > 63:
        errs.append(_too_long(path, 63))
    for m in _dns_subdomain_msgs(name.lower()):
        errs.append(_invalid(path, name, m))


def _check_pool_name(name, path, errs):
    if not name:
        errs.append(_required(path))
        return
    if len(name) > 253:
        errs.append(_too_long(path, 253))
    for part in name.split("/"):
        for m in _dns_subdomain_msgs(part):
            errs.append(_invalid(path, part, m))


def _check_c_identifier(s, path, errs):
    if len(s) > 32:
        errs.append(_too_long(path, 32))
    if not _C_ID_RE.match(s):
        errs.append(_invalid(path, s, _C_ID_MSG))


def _check_qualified_name(name, path, errs):
    """Attribute and capacity names: a C identifier, optionally with a driver-like domain."""
    parts = name.split("/")
    if len(parts) == 1:
        _check_c_identifier(parts[0], path, errs)
    elif len(parts) == 2:
        if not parts[0]:
            errs.append(_invalid(path, "", "the domain must not be empty"))
        else:
            _check_driver(parts[0], path, errs)
        if not parts[1]:
            errs.append(_invalid(path, "", "the name must not be empty"))
        else:
            _check_c_identifier(parts[1], path, errs)
    else:
        errs.append(_invalid(path, name, "must not contain more than one slash"))


def _check_label_name(value, path, errs):
    for m in _qualified_name_msgs(value):
        errs.append(_invalid(path, value, m))


def _truncate_key(key, limit):
    if len(key) <= limit:
        return key
    keep = limit - 3
    return key[:(keep + 1) // 2] + "..." + key[len(key) - keep // 2:]


def _check_meta(meta, errs):
    name = meta.get("name", "")
    if not name:
        errs.append(_required("metadata.name", "name or generateName is required"))
    else:
        for m in _dns_subdomain_msgs(name):
            errs.append(_invalid("metadata.name", name, m))
    gen = meta.get("generateName")
    if gen:
        masked = gen[:-1] + "a" if gen.endswith("-") else gen
        for m in _dns_subdomain_msgs(masked):
            errs.append(_invalid("metadata.generateName", gen, m))
    for k, v in sorted((meta.get("labels") or {}).items()):
        _check_label_name(k, "metadata.labels", errs)
        for m in _label_value_msgs(v):
            errs.append(_invalid("metadata.labels", v, m))
    for k in sorted(meta.get("annotations") or {}):
        for m in _qualified_name_msgs(k.lower()):
            errs.append(_invalid("metadata.annotations", k, m))
    refs = meta.get("ownerReferences") or []
    for ref in refs:
        for f, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not ref.get(f):
                errs.append(_invalid("metadata.ownerReferences." + f, ref.get(f, ""), what + " must not be empty"))
    controllers = [r for r in refs if r.get("controller")]
    if len(controllers) > 1:
        errs.append(_invalid("metadata.ownerReferences", refs,
                             'Only one reference can have Controller set to true. Found "true" in references for '
                             + " and ".join("%s/%s" % (r.get("kind"), r.get("name")) for r in controllers)))
    for f in meta.get("finalizers") or []:
        _check_label_name(f, "metadata.finalizers", errs)


def _check_node_selector(ns, path, errs):
    terms_path = path + ".nodeSelectorTerms"
    terms = ns.get("nodeSelectorTerms") or []
    if not terms:
        errs.append(_required(terms_path, "must have at least one node selector term"))
        return
    for i, term in enumerate(terms):
        tp = "%s[%d]" % (terms_path, i)
        for j, req in enumerate(term.get("matchExpressions") or []):
            rp = "%s.matchExpressions[%d]" % (tp, j)
            op, values = req.get("operator", ""), req.get("values") or []
            if op in ("In", "NotIn"):
                if not values:
                    errs.append(_required(rp + ".values", "must be specified when `operator` is 'In' or 'NotIn'"))
            elif op in ("Exists", "DoesNotExist"):
                if values:
                    errs.append(_forbidden(rp + ".values",
                                           "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
            elif op in ("Gt", "Lt"):
                if len(values) != 1:
                    errs.append(_required(rp + ".values",
                                          "must be specified single value when `operator` is 'Lt' or 'Gt'"))
            else:
                errs.append(_not_supported(rp + ".operator", op, ["DoesNotExist", "Exists", "Gt", "In", "Lt",
                                                                  "NotIn"]))
            _check_label_name(req.get("key", ""), rp + ".key", errs)
        for j, req in enumerate(term.get("matchFields") or []):
            rp = "%s.matchFields[%d]" % (tp, j)
            op = req.get("operator", "")
            if op in ("In", "NotIn"):
                if len(req.get("values") or []) != 1:
                    errs.append(_required(rp + ".values", "must be only one value when `operator` is 'In' or "
                                                          "'NotIn' for node field selector"))
            else:
                errs.append(_not_supported(rp + ".operator", op, ["In", "NotIn"]))
            if req.get("key") != "metadata.name":
                errs.append(_invalid(rp + ".key", req.get("key", ""), "not a valid field selector key"))


def _check_counters(counters, path, errs):
    if not counters:
        errs.append(_required(path))
    elif len(counters) > MAX_COUNTERS:
        errs.append(_too_many(path, len(counters), MAX_COUNTERS))
    else:
        for k in sorted(counters):
            _check_dns_label(k, path, errs)


def _check_counter_set(cs, path, errs):
    if not cs.get("name"):
        errs.append(_required(path + ".name"))
    else:
        _check_dns_label(cs["name"], path + ".name", errs)
    _check_counters(cs.get("counters") or {}, path + ".counters", errs)


def _check_set(items, limit, check, key, path, errs):
    """validateSet: a size limit that stops all further checks, each item, then duplicate keys."""
    if len(items) > limit:
        errs.append(_too_many(path, len(items), limit))
        return
    for i, item in enumerate(items):
        check(item, "%s[%d]" % (path, i))
    seen = set()
    for i, item in enumerate(items):
        k = key(item)
        if k in seen:
            errs.append(_duplicate("%s[%d]" % (path, i), k))
        seen.add(k)


def _attribute_values(attrs):
    n = 0
    for a in attrs.values():
        listed = sum(len(a.get(k) or []) for k in _LIST_KEYS)
        n += listed if listed else 1
    return n


def _check_attribute(a, path, errs):
    n = 0
    for k in ("bool", "int"):
        if a.get(k) is not None:
            n += 1
    if a.get("string") is not None:
        n += 1
        if len(a["string"].encode()) > MAX_ATTR_STRING:
            errs.append(_too_long(path + ".string", MAX_ATTR_STRING))
    if a.get("version") is not None:
        n += 1
        if not _SEMVER_RE.match(a["version"]):
            errs.append(_invalid(path + ".version", a["version"], "must be a string compatible with semver.org "
                                                                  "spec 2.0.0"))
        if len(a["version"].encode()) > MAX_ATTR_STRING:
            errs.append(_too_long(path + ".version", MAX_ATTR_STRING))
    for k in _LIST_KEYS:
        values = a.get(k)
        if values is None:
            continue
        n += 1
        if not values:
            errs.append(_invalid("%s.%s" % (path, k), values, "must not be empty if specified"))
        for i, v in enumerate(values):
            ip = "%s.%s[%d]" % (path, k, i)
            if k == "versions" and not _SEMVER_RE.match(v):
                errs.append(_invalid(ip, v, "must be a string compatible with semver.org spec 2.0.0"))
            if k in ("strings", "versions") and len(v.encode()) > MAX_ATTR_STRING:
                errs.append(_too_long(ip, MAX_ATTR_STRING))
    if n != 1:
        errs.append(_invalid(path, "" if n == 0 else a, "exactly one value must be specified"))


def _check_request_policy(capacity, policy, path, errs):
    cap = _qv(capacity)
    valid_values = policy.get("validValues") or []
    valid_range, default = policy.get("validRange"), policy.get("default")
    if valid_values and valid_range is not None:
        errs.append(_forbidden(path, 'exactly one policy can be specified, cannot specify "validValues" and '
                                     '"validRange" at the same time'))
        return
    if valid_values:
        vp = path + ".validValues"
        if default is None:
            errs.append(_required(path + ".default", "required when validValues is defined"))
            return
        values = [_qv(v) for v in valid_values]
        for i in range(len(values) - 1):
            if values[i] > values[i + 1]:
                errs.append(_invalid("%s[%d]" % (vp, i + 1), valid_values[i + 1],
                                     "values must be sorted in ascending order"))
        found = False
        if len(values) > MAX_VALID_VALUES:
            errs.append(_too_many(vp, len(values), MAX_VALID_VALUES))
        else:
            seen = set()
            for i, v in enumerate(values):
                if v > cap:
                    errs.append(_invalid("%s[%d]" % (vp, i), valid_values[i],
                                         "option is larger than capacity value: " + capacity))
                found |= v == _qv(default)
                key = str(math.ceil(v))  # Quantity.Value() rounds up
                if key in seen:
                    errs.append(_duplicate("%s[%d]" % (vp, i), key))
                seen.add(key)
        if not found:
            errs.append(_invalid(vp, default, "default value is not valid according to the requestPolicy"))
    elif valid_range is not None:
        rp = path + ".validRange"
        if default is None:
            errs.append(_required(path + ".default", "required when validRange is defined"))
            return
        lo, hi, step = valid_range.get("min"), valid_range.get("max"), valid_range.get("step")
        if lo is None:
            errs.append(_required(rp + ".min", "required when validRange is defined"))
            return
        d, mn = _qv(default), _qv(lo)
        if mn > cap:
            errs.append(_invalid(rp + ".min", lo, "min is larger than capacity value: " + capacity))
        if d < mn:
            errs.append(_invalid(rp + ".default", default, "default is less than min: " + lo))
        if hi is not None:
            mx = _qv(hi)
            if mn > mx:
                errs.append(_invalid(rp + ".max", lo, "min is larger than max: " + hi))
            if mx > cap:
                errs.append(_invalid(rp + ".max", hi, "max is larger than capacity value: " + capacity))
            if d > mx:
                errs.append(_invalid(rp + ".default", default, "default is more than max: " + hi))
        if step is not None:
            st = _qv(step)
            if st <= 0:
                errs.append(_invalid(rp + ".step", step, "must be greater than zero"))
                return
            added = mn + st
            if added > cap:
                errs.append(_invalid(rp + ".step", step, "one step %s is larger than capacity value: %s"
                                     % (format_quantity(added, parse_quantity(lo)[1]), capacity)))
            unsafe = False
            for q, what in ((default, "default"), (lo, "min"), (hi, "max"), (step, "step")):
                if q is None:
                    continue
                if _qv(q) < 0:
                    errs.append(_invalid(rp + "." + what, q, "must be greater than or equal to 0"))
                    unsafe = True
                elif _qv(q) > MAX_INT64:
                    errs.append(_invalid(rp + "." + what, q, "must not be larger than 9223372036854775807"))
                    unsafe = True
            if not unsafe:
                for q in (default, hi):
                    if q is not None and (math.ceil(_qv(q)) - math.ceil(mn)) % math.ceil(st):
                        errs.append(_invalid(rp + ".step", q, "value is not a multiple of a given step (%s) from "
                                                              "(%s)" % (step, lo)))


def _check_taint(t, path, errs):
    _check_label_name(t.get("key", ""), path + ".key", errs)
    if t.get("value"):
        for m in _label_value_msgs(t["value"]):
            errs.append(_invalid(path + ".value", t["value"], m))
    effect = t.get("effect", "")
    if not effect:
        errs.append(_required(path + ".effect"))
    elif effect not in TAINT_EFFECTS:
        errs.append(_not_supported(path + ".effect", effect, TAINT_EFFECTS))


def _check_binding(conds, failures, path, errs):
    for what, items in (("bindingConditions", conds), ("bindingFailureConditions", failures)):
        if len(items) > MAX_BINDING_CONDITIONS:
            errs.append(_too_many(path + "." + what, len(items), MAX_BINDING_CONDITIONS))
        else:
            for i, c in enumerate(items):
                _check_label_name(c, "%s.%s[%d]" % (path, what, i), errs)
    seen = set()
    for i, c in enumerate(conds):
        if c in seen:
            errs.append(_duplicate("%s.bindingConditions[%d]" % (path, i), c))
        seen.add(c)
    seen = set()
    for i, c in enumerate(failures):
        if c in seen:
            errs.append(_duplicate("%s.bindingFailureConditions[%d]" % (path, i), c))
        seen.add(c)
        if c in conds:
            errs.append(_invalid("%s.bindingFailureConditions[%d]" % (path, i), c,
                                 "bindingFailureConditions must not overlap with bindingConditions"))
    if not conds and failures:
        errs.append(_invalid(path + ".bindingConditions", conds,
                             "bindingConditions are required to use bindingFailureConditions"))
    if not failures and conds:
        errs.append(_invalid(path + ".bindingFailureConditions", failures,
                             "bindingFailureConditions are required to use bindingConditions"))


def _check_allocatable_mappings(mappings, capacity, path, errs):
    for key in sorted(mappings):
        kp = "%s[%s]" % (path, key)
        if key not in ("cpu", "memory", "ephemeral-storage") and not (key.startswith("hugepages-") and len(key) > 10):
            errs.append(_invalid(kp, key, "must be a node allocatable resource name"))
        m = mappings[key]
        ck = m.get("capacityKey")
        if ck is not None:
            if ck == "":
                errs.append(_invalid(kp + ".capacityKey", "", "capacityKey must not be an empty string"))
            elif ck not in capacity:
                errs.append(FieldError("notfound", kp + ".capacityKey", ck))
        mult = m.get("allocationMultiplier")
        if mult is not None and _qv(mult) <= 0:
            errs.append(_invalid(kp + ".allocationMultiplier", mult, "must be positive"))


def _check_device(d, old, path, per_device, errs):
    multi = d.get("allowMultipleAllocations") is True
    _check_dns_label(d.get("name", ""), path + ".name", errs)
    attrs, caps = d.get("attributes") or {}, d.get("capacity") or {}
    if len(attrs) + len(caps) > MAX_ATTRS_AND_CAPS:
        errs.append(_invalid(path, len(attrs) + len(caps), "the total number of attributes and capacities must "
                                                           "not exceed %d" % MAX_ATTRS_AND_CAPS))
    values = _attribute_values(attrs)
    if values > MAX_ATTR_VALUES:
        errs.append(_invalid(path, values, "the total number of attribute values must not exceed %d"
                             % MAX_ATTR_VALUES))
    for key in sorted(attrs):
        _check_qualified_name(key, path + ".attributes", errs)
        _check_attribute(attrs[key], "%s.attributes[%s]" % (path, _truncate_key(key, 96)), errs)
    # An unchanged capacity map or taint list is not validated again (ratcheting).
    if old is None or old.get("capacity") != d.get("capacity"):
        for key in sorted(caps):
            _check_qualified_name(key, path + ".capacity", errs)
            kp = "%s.capacity[%s]" % (path, _truncate_key(key, 96))
            policy = caps[key].get("requestPolicy")
            if policy is None:
                continue
            if multi:
                _check_request_policy(caps[key].get("value", "0"), policy, kp + ".requestPolicy", errs)
            else:
                errs.append(_forbidden(kp + ".requestPolicy", "allowMultipleAllocations must be true"))
    taints = d.get("taints")
    if taints is not None and (old is None or old.get("taints") != taints):
        if len(taints) > MAX_TAINTS:
            errs.append(_too_many(path + ".taints", len(taints), MAX_TAINTS))
        else:
            for i, t in enumerate(taints):
                _check_taint(t, "%s.taints[%d]" % (path, i), errs)

    def check_consumption(c, p):
        if not c.get("counterSet"):
            errs.append(_required(p + ".counterSet"))
        else:
            _check_dns_label(c["counterSet"], p + ".counterSet", errs)
        _check_counters(c.get("counters") or {}, p + ".counters", errs)

    _check_set(d.get("consumesCounters") or [], MAX_CONSUMPTIONS, check_consumption,
               lambda c: c.get("counterSet", ""), path + ".consumesCounters", errs)
    if per_device is True:
        chosen = []
        if d.get("nodeName") is not None:
            if d["nodeName"]:
                chosen.append("`nodeName`")
                for m in _dns_subdomain_msgs(d["nodeName"]):
                    errs.append(_invalid(path + ".nodeName", d["nodeName"], m))
            else:
                errs.append(_invalid(path + ".nodeName", "", "must not be empty"))
        if d.get("nodeSelector") is not None:
            chosen.append("`nodeSelector`")
            _check_node_selector(d["nodeSelector"], path + ".nodeSelector", errs)
        if d.get("allNodes") is not None:
            if d["allNodes"]:
                chosen.append("`allNodes`")
            else:
                errs.append(_invalid(path + ".allNodes", False, "must be either unset or set to true"))
        what = ("exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec")
        if not chosen:
            errs.append(_required(path, what))
        elif len(chosen) > 1:
            errs.append(_invalid(path, "{%s}" % ", ".join(chosen), what))
    elif any(d.get(k) is not None for k in ("nodeName", "nodeSelector", "allNodes")):
        errs.append(_invalid(path, None, "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                                         "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"))
    _check_binding(d.get("bindingConditions") or [], d.get("bindingFailureConditions") or [], path, errs)
    _check_allocatable_mappings(d.get("nodeAllocatableResourceMappings") or {}, caps,
                                path + ".nodeAllocatableResourceMappings", errs)


def _check_spec(spec, old_spec, errs):
    _check_driver(spec.get("driver", ""), "spec.driver", errs)
    pool = spec.get("pool") or {}
    _check_pool_name(pool.get("name", ""), "spec.pool.name", errs)
    if pool.get("resourceSliceCount", 0) <= 0:
        errs.append(_invalid("spec.pool.resourceSliceCount", pool.get("resourceSliceCount", 0),
                             "must be greater than zero"))
    if pool.get("generation", 0) < 0:
        errs.append(_invalid("spec.pool.generation", pool["generation"], "must be greater than or equal to zero"))
    if old_spec is not None:
        for path, new, old in (("spec.pool.name", pool.get("name", ""), old_spec["pool"].get("name", "")),
                               ("spec.driver", spec.get("driver", ""), old_spec.get("driver", "")),
                               ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName"))):
            if new != old:
                errs.append(_invalid(path, new, "field is immutable"))

    chosen = []
    if spec.get("nodeName") is not None:
        if spec["nodeName"]:
            chosen.append("`nodeName`")
            for m in _dns_subdomain_msgs(spec["nodeName"]):
                errs.append(_invalid("spec.nodeName", spec["nodeName"], m))
        else:
            errs.append(_invalid("spec.nodeName", "", "must be either unset or set to a non-empty string"))
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        _check_node_selector(spec["nodeSelector"], "spec.nodeSelector", errs)
        terms = spec["nodeSelector"].get("nodeSelectorTerms") or []
        if len(terms) != 1:
            errs.append(_invalid("spec.nodeSelector.nodeSelectorTerms", terms,
                                 "must have exactly one node selector term"))
    for key in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(key) is not None:
            if spec[key]:
                chosen.append("`%s`" % key)
            else:
                errs.append(_invalid("spec." + key, False, "must be either unset or set to true"))
    what = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not chosen:
        errs.append(_required("spec", what))
    elif len(chosen) > 1:
        errs.append(_invalid("spec", "{%s}" % ", ".join(chosen), what + ", but multiple fields are set"))
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        errs.append(_invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))

    devices = spec.get("devices") or []
    advanced = any(d.get("taints") or d.get("consumesCounters")
                   or any(a.get(k) is not None for a in (d.get("attributes") or {}).values() for k in _LIST_KEYS)
                   for d in devices)
    old_devices = {d.get("name"): d for d in _devices(old_spec)}
    _check_set(devices, MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES,
               lambda d, p: _check_device(d, old_devices.get(d.get("name")), p, spec.get("perDeviceNodeSelection"),
                                          errs),
               lambda d: d.get("name", ""), "spec.devices", errs)
    _check_set(spec.get("sharedCounters") or [], MAX_COUNTER_SETS, lambda cs, p: _check_counter_set(cs, p, errs),
               lambda cs: cs.get("name", ""), "spec.sharedCounters", errs)


def validate_slice(obj, old=None):
    """Field errors of an internal ResourceSlice (old: the stored one, on update)."""
    errs = []
    _check_meta(obj["metadata"], errs)
    _check_spec(obj["spec"], old["spec"] if old else None, errs)
    return errs


# ---------------------------------------------------------------------------
# ResourceClaim status (pkg/apis/resource/validation, pkg/registry/resource) and Leases.

MAX_DEVICE_CONDITIONS = 8  # resource.AllocatedDeviceStatusMaxConditions
MAX_DEVICE_DATA = 10 * 1024  # resource.AllocatedDeviceStatusDataMaxLength
_CONDITION_STATUSES = ["False", "True", "Unknown"]
_REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_REASON_MSG = ("a condition reason must start with alphabetic character, optionally followed by a string of "
               "alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'")
_KEY_FIELDS = ("driver", "pool", "device", "shareID")

# The refusal of a status.devices change without the per-driver permission, worded as
# AuthorizedForDeviceStatus in k8s.io/kubernetes/pkg/registry/resource (the package's
# status authorization helpers, DRAResourceClaimGranularStatusAuthorization):
#   field.Forbidden(fieldPath, fmt.Sprintf(`changing status.devices requires resource="resourceclaims/driver",
#                   verb="%s" permission: %s`, verbs, err))
# verbs is a Go []string ("[associated-node:patch arbitrary-node:patch]"), err the first refusal,
# a responsewriters.ForbiddenStatusError for the synthetic resourceclaims/driver subresource
# named after the driver. The field errors come back together as one 422 Invalid.
DEVICE_STATUS_REFUSAL = 'changing status.devices requires resource="resourceclaims/driver", verb="%s" permission: %s'
BINDING_REFUSAL = ('changing status.allocation or status.reservedFor requires resource="resourceclaims/binding", '
                   'verb="%s" permission: %s')
VERB_ASSOCIATED_NODE = "associated-node:"  # resourcev1.VerbPrefixAssociatedNode
VERB_ARBITRARY_NODE = "arbitrary-node:"  # resourcev1.VerbPrefixArbitraryNode


def _device_key(d):
    """The list-map key of status.devices: driver, pool, device and shareID."""
    return (d.get("driver") or "", d.get("pool") or "", d.get("device") or "", d.get("shareID") or "")


def _key_fields(key):
    out = {"device": key[2], "driver": key[0], "pool": key[1]}
    if key[3]:
        out["shareID"] = key[3]
    return out


def _fields_key(key):
    """A list-map item in a FieldsV1 set: k:{...} with the key fields sorted by name."""
    return "k:" + json.dumps(_key_fields(key), sort_keys=True, separators=(",", ":"))


def _path_key(key):
    """A list-map item in a field path, as structured-merge-diff prints it."""
    return "[" + ",".join('%s=%s' % (k, json.dumps(v)) for k, v in sorted(_key_fields(key).items())) + "]"


def _shown_key(key):
    """structured.SharedDeviceID's String(): driver/pool/device, then /shareID when there is one."""
    return _Shown("/".join(key[:3]) + ("/" + key[3] if key[3] else ""))


def _decode_device_statuses(devices, path="status.devices"):
    """status.devices of a request, decoded as the apiserver does (types checked, unknown fields
    dropped with a warning, times normalized). Returns (devices, warnings)."""
    if devices is None:
        return [], []
    dec = _Decoder(CLAIM_KIND)
    out = dec.decode(_list(_DEVICE_STATUS), devices, path)
    for d in out:
        if not d.get("conditions"):
            d["conditions"] = None
    return [_encode(_DEVICE_STATUS, d) for d in out], ['unknown field "%s"' % f for f in dec.unknown]


def _check_conditions(conds, path, errs):
    """metav1validation.ValidateConditions."""
    seen = set()
    for i, c in enumerate(conds):
        cp = "%s[%d]" % (path, i)
        if c.get("type", "") in seen:
            errs.append(_duplicate(cp + ".type", c.get("type", "")))
        seen.add(c.get("type", ""))
        _check_label_name(c.get("type", ""), cp + ".type", errs)
        if c.get("status", "") not in _CONDITION_STATUSES:
            errs.append(_not_supported(cp + ".status", c.get("status", ""), _CONDITION_STATUSES))
        if (c.get("observedGeneration") or 0) < 0:
            errs.append(_invalid(cp + ".observedGeneration", c["observedGeneration"],
                                 "must be greater than or equal to zero"))
        if not c.get("lastTransitionTime"):
            errs.append(_required(cp + ".lastTransitionTime", "must be set"))
        reason = c.get("reason", "")
        if not reason:
            errs.append(_required(cp + ".reason", "must be set"))
        else:
            if not _REASON_RE.match(reason):
                errs.append(_invalid(cp + ".reason", reason, _REASON_MSG))
            if len(reason) > 1024:
                errs.append(_too_long(cp + ".reason", 1024))
        if len(c.get("message", "")) > 32 * 1024:
            errs.append(_too_long(cp + ".message", 32 * 1024))


def validate_device_statuses(status):
    """The status.devices part of ValidateResourceClaimStatusUpdate: names, an entry for an allocated
    device only, at most 8 conditions, valid conditions, data a JSON object of at most 10 KiB, and
    each key once. (networkData and the shareID's UUID form are not checked.)"""
    errs = []
    allocated = {_device_key(r) for r in (((status.get("allocation") or {}).get("devices") or {})
                                          .get("results") or [])}
    devices = status.get("devices") or []
    for i, d in enumerate(devices):
        p = "status.devices[%d]" % i
        _check_driver(d.get("driver", ""), p + ".driver", errs)
        _check_pool_name(d.get("pool", ""), p + ".pool", errs)
        if not d.get("device"):
            errs.append(_required(p + ".device"))
        else:
            _check_dns_label(d["device"], p + ".device", errs)
        key = _device_key(d)
        if key not in allocated:
            errs.append(_invalid(p, _shown_key(key), "must be an allocated device in the claim"))
        conds = d.get("conditions") or []
        if len(conds) > MAX_DEVICE_CONDITIONS:
            errs.append(_too_many(p + ".conditions", len(conds), MAX_DEVICE_CONDITIONS))
        _check_conditions(conds, p + ".conditions", errs)
        if "data" in d and d["data"] is not None:
            if len(_dumps(d["data"])) > MAX_DEVICE_DATA:
                errs.append(_too_long(p + ".data", MAX_DEVICE_DATA))
            elif not isinstance(d["data"], dict):
                errs.append(_invalid(p + ".data", "<value omitted>", "must be a valid JSON object"))
    seen = set()
    for i, d in enumerate(devices):
        key = _device_key(d)
        if key in seen:
            errs.append(_duplicate("status.devices[%d].deviceID" % i, _shown_key(key)))
        seen.add(key)
    return errs


def _modified_drivers(new_devices, old_devices):
    """getModifiedDrivers: the drivers of entries added, removed or changed."""
    old = {_device_key(d): d for d in old_devices or []}
    drivers = set()
    for d in new_devices or []:
        k = _device_key(d)
        if old.pop(k, None) != d:
            drivers.add(d.get("driver", ""))
    drivers.update(d.get("driver", "") for d in old.values())
    return sorted(drivers)


def _apply_owners(claim):
    """What each server-side apply manager of the status owns in status.devices, read back from
    managedFields: manager -> {device key: set of field names}."""
    owners = {}
    for e in claim["metadata"].get("managedFields") or []:
        if e.get("operation") != "Apply" or e.get("subresource") != "status":
            continue
        devices = ((e.get("fieldsV1") or {}).get("f:status") or {}).get("f:devices") or {}
        owned = {}
        for k, fields in devices.items():
            if k.startswith("k:"):
                kf = json.loads(k[2:])
                owned[_device_key(kf)] = {f[2:] for f in fields if f.startswith("f:")}
        owners[e.get("manager", "")] = owned
    return owners


def _apply_entry(manager, owned, devices):
    """The managedFields entry of an apply manager that owns these fields of status.devices."""
    by_key = {_device_key(d): d for d in devices}
    out = {}
    for key in sorted(owned, key=_fields_key):
        item = {".": {}}
        for f in sorted(owned[key]):
            if f == "conditions":
                conds = (by_key.get(key) or {}).get("conditions") or []
                item["f:conditions"] = dict({".": {}}, **{
                    "k:" + json.dumps({"type": c.get("type", "")}, separators=(",", ":")):
                        dict({".": {}}, **{"f:" + x: {} for x in sorted(c)}) for c in conds})
            else:
                item["f:" + f] = {}
        out[_fields_key(key)] = item
    return {"manager": manager, "operation": "Apply", "apiVersion": API_VERSION, "time": _timestamp(),
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:devices": out}}, "subresource": "status"}


def _apply_conflict(conflicts):
    """409 for fields another apply manager owns with another value (managedfields' NewConflictError)."""
    def who(m):
        return '"%s" with subresource "status"' % m
    causes = [{"reason": "FieldManagerConflict", "message": "conflict with " + who(m), "field": path}
              for m, path in conflicts]
    if len(conflicts) == 1:
        msg = "Apply failed with 1 conflict: conflict with %s: %s" % (who(conflicts[0][0]), conflicts[0][1])
    else:
        parts = []
        for m in sorted({m for m, _ in conflicts}):
            parts.append("conflicts with %s:" % who(m))
            parts += ["- " + path for mm, path in conflicts if mm == m]
        msg = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(parts))
    return APIError(409, msg, details={"causes": causes})


def _apply_devices(cur, applied, manager, force):
    """Server-side apply of status.devices, simplified: the list is a map by driver, pool, device
    and shareID; an entry's fields (conditions as a whole, data, networkData) are owned by the
    managers that applied them. The manager's entries are upserted; fields and entries it
    applied before and leaves out now are removed unless another manager owns them; entries of
    other managers and entries nobody applied stay. A field another manager owns with another
    value is a conflict (409) unless force. Returns (devices, managedFields)."""
    owners = _apply_owners(cur)
    mine = owners.get(manager, {})
    current = collections.OrderedDict((_device_key(d), d) for d in (cur.get("status") or {}).get("devices") or [])
    want = collections.OrderedDict()
    for d in applied:
        want[_device_key(d)] = {f: v for f, v in d.items() if not (f == "conditions" and v is None)}
    conflicts = []
    for key, entry in want.items():
        have = current.get(key, {})
        for f, v in entry.items():
            if f in _KEY_FIELDS or f not in have or have[f] == v:
                continue
            for m, owned in owners.items():
                if m != manager and f in owned.get(key, ()):
                    conflicts.append((m, ".status.devices%s.%s" % (_path_key(key), f)))
                    if force:
                        owned[key].discard(f)
    if conflicts and not force:
        raise _apply_conflict(conflicts)

    def others_own(key, f=None):
        return any((f in owned.get(key, ()) if f else bool(owned.get(key))) for m, owned in owners.items()
                   if m != manager)

    result = collections.OrderedDict()
    for key, have in current.items():
        e = dict(have)
        if key in want:
            for f in list(e):
                if f not in _KEY_FIELDS and f not in want[key] and f in mine.get(key, ()) and not others_own(key, f):
                    del e[f]
            e.update(want[key])
        elif key in mine:
            if not others_own(key):
                continue  # nobody applies it any more
            for f in mine[key]:
                if f not in _KEY_FIELDS and not others_own(key, f):
                    e.pop(f, None)
        result[key] = e
    for key, entry in want.items():
        if key not in result:
            result[key] = dict(entry)
    devices, _ = _decode_device_statuses(list(result.values()))
    owners[manager] = {key: set(entry) for key, entry in want.items()}
    managed = []
    for e in cur["metadata"].get("managedFields") or []:
        if e.get("operation") == "Apply" and e.get("subresource") == "status":
            m = e.get("manager", "")
            if m == manager:
                continue
            if owners.get(m) != _apply_owners({"metadata": {"managedFields": [e]}}).get(m):
                owned = {k: v for k, v in owners[m].items() if v}
                if not owned:
                    continue
                e = _apply_entry(m, owned, devices)
        managed.append(e)
    if owners[manager]:
        managed.append(_apply_entry(manager, owners[manager], devices))
    return devices, managed


def _drop_deallocated(new_status, old_status):
    """dropDeallocatedStatusDevices: entries of devices no longer allocated go."""
    def ids(status):
        return {_device_key(r)[:3] for r in (((status.get("allocation") or {}).get("devices") or {})
                                             .get("results") or [])}
    gone = ids(old_status) - ids(new_status)
    if gone and new_status.get("devices"):
        new_status["devices"] = [d for d in new_status["devices"] if _device_key(d)[:3] not in gone]
        if not new_status["devices"]:
            del new_status["devices"]


def validate_lease(obj):
    """ValidateLease (pkg/apis/coordination/validation)."""
    errs = []
    meta, spec = obj["metadata"], obj["spec"]
    _check_meta(meta, errs)
    if spec.get("leaseDurationSeconds") is not None and spec["leaseDurationSeconds"] <= 0:
        errs.append(_invalid("spec.leaseDurationSeconds", spec["leaseDurationSeconds"], "must be greater than 0"))
    if spec.get("leaseTransitions") is not None and spec["leaseTransitions"] < 0:
        errs.append(_invalid("spec.leaseTransitions", spec["leaseTransitions"], "must be greater than or equal to 0"))
    return errs


# ---------------------------------------------------------------------------
# Selectors.

_SLICE_FIELDS = ("metadata.name", "spec.driver", "spec.nodeName")
_META_FIELDS = ("metadata.name", "metadata.namespace")  # what a ResourceClaim can be selected by


def _parse_field_selector(s, supported=_SLICE_FIELDS):
    terms = []
    for term in filter(None, (t.strip() for t in (s or "").split(","))):
        m = re.match(r"^([^=!]+?)\s*(==|!=|=)\s*(.*)$", term)
        if not m:
            raise _bad_request('invalid field selector: "%s": expected an operator' % term)
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in supported:
            raise _bad_request("field label not supported: " + field)
        terms.append((field, op != "!=", value))
    return terms


def _field_value(obj, field):
    if field in ("metadata.name", "metadata.namespace"):
        return obj["metadata"].get(field.split(".")[1], "")
    return obj["spec"].get(field.split(".")[1]) or ""


def _parse_label_selector(s):
    reqs = []
    for term in (t.strip() for t in re.split(r",(?![^()]*\))", s or "")):
        if not term:
            continue
        m = re.match(r"^([^\s!=()]+)\s+(in|notin)\s+\(([^)]*)\)$", term)
        if m:
            reqs.append((m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}))
            continue
        m = re.match(r"^([^\s!=()]+)\s*(==|!=|=)\s*([^\s!=()]*)$", term)
        if m:
            reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
            continue
        m = re.match(r"^(!?)([^\s!=()]+)$", term)
        if m:
            reqs.append((m.group(2), "!" if m.group(1) else "exists", None))
            continue
        raise _bad_request('unable to parse requirement: found "%s", expected a label selector' % term)
    return reqs


def _labels_match(obj, reqs):
    labels = obj.get("metadata", {}).get("labels") or {}
    for key, op, value in reqs:
        have = labels.get(key)
        if op == "exists" and have is None or op == "!" and have is not None:
            return False
        if op == "=" and have != value or op == "!=" and have == value:
            return False
        if op == "in" and have not in value or op == "notin" and have in value:
            return False
    return True


class _Selector:
    def __init__(self, query, fields=_SLICE_FIELDS):
        self.fields = _parse_field_selector(query.get("fieldSelector"), fields)
        self.labels = _parse_label_selector(query.get("labelSelector"))

    def empty(self):
        return not self.fields and not self.labels

    def match(self, obj):
        if not all((_field_value(obj, f) == v) == eq for f, eq, v in self.fields):
            return False
        return _labels_match(obj, self.labels)


# ---------------------------------------------------------------------------
# Patches.

def _merge_patch(target, patch):
    """RFC 7386. Strategic merge patches are applied the same way: every list
    of a ResourceSlice is atomic, so both replace lists whole."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("JSON pointer must start with '/': " + path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def _json_patch(doc, ops):
    """RFC 6902."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise ValueError("a JSON patch is a list of operations")
    for op in ops:
        kind, parts = op.get("op"), _pointer(op.get("path", ""))
        if kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise ValueError("testing value %s failed" % op.get("path"))
            continue
        if kind in ("move", "copy"):
            src = _pointer(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, src))
            if kind == "move":
                parent = _walk(doc, src[:-1])
                del parent[int(src[-1]) if isinstance(parent, list) else src[-1]]
            kind, op = "add", dict(op, value=value)
        if not parts:
            if kind in ("add", "replace"):
                doc = copy.deepcopy(op.get("value"))
                continue
            raise ValueError("cannot remove the whole document")
        parent, last = _walk(doc, parts[:-1]), parts[-1]
        if kind == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op.get("value")))
            else:
                parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "replace":
            if isinstance(parent, list):
                parent[int(last)] = copy.deepcopy(op.get("value"))
            else:
                if last not in parent:
                    raise KeyError(last)
                parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise ValueError("unknown JSON patch operation %r" % kind)
    return doc


# ---------------------------------------------------------------------------
# Identities and RBAC.

NODE_NAME_KEY = "authentication.kubernetes.io/node-name"  # serviceaccount.NodeNameKey
_SA_PREFIX = "system:serviceaccount:"


class _Identity:
    """Who a bearer token authenticates as, and what RBAC lets it do. rules None: everything
    (the tokens of a plain list, as before RBAC was modelled)."""

    def __init__(self, user="system:admin", groups=None, extra=None, rules=None):
        self.user = user
        self.groups = list(groups or [])
        self.extra = {k: list(v) for k, v in (extra or {}).items()}
        self.rules = None if rules is None else [dict(r) for r in rules]
        for r in self.rules or []:
            if not r.get("resource") or not r.get("verbs"):
                raise ValueError("an RBAC rule needs a resource and verbs: %r" % (r,))

    @classmethod
    def of(cls, entry):
        if entry is None:
            return cls()
        if isinstance(entry, cls):
            return entry
        unknown = set(entry) - {"user", "groups", "extra", "rules"}
        if unknown:
            raise ValueError("unknown keys in a token entry: " + ", ".join(sorted(unknown)))
        return cls(entry.get("user", "system:admin"), entry.get("groups"), entry.get("extra"), entry.get("rules"))

    def allows(self, verb, group, resource, namespace="", name=""):
        """RBAC's rule match: a rule without "namespace" is bound cluster-wide (a ClusterRoleBinding),
        one with it applies in that namespace only (a RoleBinding). resourceNames match only
        requests for one named object, so never a list, a watch or a create."""
        if self.rules is None:
            return True
        for r in self.rules:
            if r.get("namespace") is not None and r["namespace"] != namespace:
                continue
            groups = r.get("apiGroups")
            if groups is None:
                groups = [_RULE_GROUPS.get(r["resource"].split("/")[0], group)]
            if "*" not in groups and group not in groups:
                continue
            if r["resource"] not in ("*", resource):
                continue
            if "*" not in r["verbs"] and verb not in r["verbs"]:
                continue
            names = r.get("resourceNames") or []
            if names and name not in names:
                continue
            return True
        return False


# The API group a rule's resource is in when the rule names none.
_RULE_GROUPS = {"nodes": "", SLICES: GROUP, CLAIMS: GROUP, LEASES: COORDINATION}


def _forbidden_message(ident, verb, group, resource, namespace="", name=""):
    """responsewriters.ForbiddenStatusError's message: apierrors.NewForbidden around
    forbiddenMessage() (k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go).
    resource may name a subresource ("resourceclaims/status")."""
    if namespace:
        where = 'in the namespace "%s"' % namespace
    else:
        where = "at the cluster scope"
    why = 'User "%s" cannot %s resource "%s" in API group "%s" %s' % (ident.user, verb, resource, group, where)
    qualified = _qualified(resource.split("/")[0], group)
    if name:
        return '%s "%s" is forbidden: %s' % (qualified, name, why)
    return "%s is forbidden: %s" % (qualified, why)


def _forbidden_error(ident, verb, group, resource, namespace="", name=""):
    details = _details(name, resource.split("/")[0], group)
    if not name:
        del details["name"]  # StatusDetails.name is omitempty
    return APIError(403, _forbidden_message(ident, verb, group, resource, namespace, name), details=details)


def _sa_node(ident):
    """The node a pod-bound ServiceAccount token is bound to, or "": the user must be a
    ServiceAccount (serviceaccount.SplitUsername) with exactly one node-name extra that is a
    valid node name (saAssociatedWithAllocatedNode in k8s.io/kubernetes/pkg/registry/resource)."""
    if not ident.user.startswith(_SA_PREFIX):
        return ""
    parts = ident.user[len(_SA_PREFIX):].split(":")
    if len(parts) != 2 or _dns_label_msgs(parts[0]) or _dns_subdomain_msgs(parts[1]):
        return ""
    nodes = ident.extra.get(NODE_NAME_KEY) or []
    if len(nodes) != 1 or _dns_subdomain_msgs(nodes[0]):
        return ""
    return nodes[0]


def _allocated_node(status):
    """nodeNameFromAllocation: the node of an allocation whose nodeSelector is exactly one term
    with exactly one matchFields {metadata.name In [node]} and nothing else; otherwise ""."""
    ns = ((status or {}).get("allocation") or {}).get("nodeSelector")
    if not ns:
        return ""
    terms = ns.get("nodeSelectorTerms") or []
    if len(terms) != 1:
        return ""
    term = terms[0]
    fields = term.get("matchFields") or []
    if term.get("matchExpressions") or len(fields) != 1:
        return ""
    f = fields[0]
    if f.get("key") != "metadata.name" or f.get("operator") != "In" or len(f.get("values") or []) != 1:
        return ""
    return f["values"][0]


# ---------------------------------------------------------------------------
# The store: one lock, one resourceVersion counter, an event history for watches.

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def _fields_v1(obj):
    """A managedFields entry's field set, at the depth a controller's update touches."""
    meta, out = obj["metadata"], {}
    for k in ("labels", "annotations"):
        if meta.get(k):
            out["f:" + k] = dict({".": {}}, **{"f:" + key: {} for key in sorted(meta[k])})
    if meta.get("ownerReferences"):
        out["f:ownerReferences"] = dict({".": {}}, **{'k:{"uid":"%s"}' % r.get("uid", ""): {}
                                                      for r in meta["ownerReferences"]})
    fields = {"f:metadata": out} if out else {}
    fields["f:spec"] = {"f:" + k: {} for k in obj.get("spec") or {}}
    return fields


def _event_line(etype, obj):
    return (_dumps({"type": etype, "object": obj}) + "\n").encode()


class _Res:
    """What the store and the watches need to know of a resource."""

    def __init__(self, name, group, kind, namespaced, fields):
        self.name, self.group, self.kind, self.namespaced, self.fields = name, group, kind, namespaced, fields
        self.api_version = group + "/v1"


_RESOURCES = {
    SLICES: _Res(SLICES, GROUP, SLICE_KIND, False, _SLICE_FIELDS),
    CLAIMS: _Res(CLAIMS, GROUP, CLAIM_KIND, True, _META_FIELDS),
    LEASES: _Res(LEASES, COORDINATION, LEASE_KIND, True, _META_FIELDS),
}


def _sort_key(key):
    """The order of etcd keys: a namespaced object sorts by namespace/name."""
    return key if isinstance(key, str) else "/".join(key)


def _with_rv(obj, rv):
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = rv
    return out


class _Watch:
    """One open watch: a queue its handler thread drains onto the HTTP stream."""

    def __init__(self, selector, bookmarks, query, resource=SLICES, namespace=None):
        self.selector = selector
        self.bookmarks = bookmarks
        self.query = dict(query)
        self.resource, self.namespace = resource, namespace
        self.kind, self.api_version = _RESOURCES[resource].kind, _RESOURCES[resource].api_version
        self.q = queue.Queue()

    def sees(self, obj):
        return (self.namespace is None or obj["metadata"].get("namespace") == self.namespace) \
            and self.selector.match(obj)

    def offer(self, resource, etype, old, new, lines=None):
        """Queues what this watch sees of a change. As the watch cache does, an object that
        starts matching the selection arrives as ADDED, and one that stops matching as DELETED
        carrying its previous content with the new resourceVersion. lines: the event lines
        already encoded for this change, shared by the watches that see it."""
        if resource != self.resource:
            return
        lines = {} if lines is None else lines

        def put(kind, obj):
            if kind not in lines:
                lines[kind] = _event_line(kind.split("-")[0], obj)
            self.q.put(("data", lines[kind]))

        if etype == "MODIFIED":
            was, now = self.sees(old), self.sees(new)
            if was and now:
                put("MODIFIED", new)
            elif now:
                put("ADDED", new)
            elif was:
                put("DELETED-old", _with_rv(old, new["metadata"]["resourceVersion"]))
        elif self.sees(new):
            put(etype, new)


class _Store:
    HISTORY = 10000  # events kept for watches that resume
    SNAPSHOTS = 32  # list results kept for continue tokens

    def __init__(self, gates):
        self.lock = threading.RLock()
        self.gates = gates
        self.rv = 0
        self.nodes = {}
        self.objects = {r: {} for r in _RESOURCES}
        self.slices = self.objects[SLICES]  # name -> object
        self.claims = self.objects[CLAIMS]  # (namespace, name) -> object
        self.leases = self.objects[LEASES]  # (namespace, name) -> object
        self.history = []
        self.floor = 0  # a watch may resume from any resourceVersion >= floor
        self.watches = set()
        self.snapshots = collections.OrderedDict()

    def bump(self):
        self.rv += 1
        return self.rv

    def record(self, etype, old, new, resource=SLICES):
        self.history.append((self.rv, resource, etype, old, new))
        if len(self.history) > self.HISTORY:
            del self.history[: len(self.history) - self.HISTORY]
            self.floor = self.history[0][0] - 1
        lines = {}
        for w in list(self.watches):
            w.offer(resource, etype, old, new, lines)

    def expire(self):
        # The counter moves on, as other writes move it on a real cluster: every
        # resourceVersion handed out so far is too old, while a list made now
        # returns one that a watch can start from.
        with self.lock:
            self.history = []
            self.floor = self.bump()
            self.snapshots.clear()

    # -- ResourceSlices --------------------------------------------------------

    def _generate_name(self, base):
        base = base[:58]  # SimpleNameGenerator keeps names within 63 characters
        while True:
            name = base + "".join(random.choice(_NAME_CHARS) for _ in range(5))
            if name not in self.slices:
                return name

    def _managed(self, manager, obj):
        return {"manager": manager, "operation": "Update", "apiVersion": API_VERSION, "time": _timestamp(),
                "fieldsType": "FieldsV1", "fieldsV1": _fields_v1(obj)}

    def create_slice(self, body, strict=False, dry_run=False, manager=""):
        obj, warnings = _decode_slice(body, strict)
        meta = obj["metadata"]
        for k in ("namespace", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(k, None)
        meta["generation"] = 1
        meta["creationTimestamp"] = _timestamp()
        meta["uid"] = str(uuid.uuid4())
        with self.lock:
            _drop_disabled(obj["spec"], None, self.gates)
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(meta["generateName"])
            errs = validate_slice(obj)
            if errs:
                raise _invalid_error(meta.get("name", ""), errs)
            if meta.get("resourceVersion"):
                raise APIError(500, "resourceVersion should not be set on objects to be created")
            name = meta["name"]
            if name in self.slices:
                raise _already_exists(name)
            meta["managedFields"] = [self._managed(manager, obj)]
            stored = _encode_slice(obj)
            if dry_run:
                return stored, warnings
            stored["metadata"]["resourceVersion"] = str(self.bump())
            self.slices[name] = stored
            self.record("ADDED", None, stored)
            return copy.deepcopy(stored), warnings

    def update_slice(self, name, body, strict=False, dry_run=False, manager=""):
        obj, warnings = _decode_slice(body, strict)
        meta, spec = obj["metadata"], obj["spec"]
        if meta.get("name", "") != name:
            raise _bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                               % (meta.get("name", ""), name))
        with self.lock:
            cur = self.slices.get(name)
            if cur is None:
                raise _not_found(name)
            old, _ = _decode_slice(cur)
            old_meta = old["metadata"]
            if meta.get("uid") and meta["uid"] != old_meta["uid"]:
                raise _conflict(name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                % (meta["uid"], old_meta["uid"]))
            # An update without a resourceVersion is unconditional, as the
            # ResourceSlice strategy allows (AllowUnconditionalUpdate).
            if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
                raise _conflict(name)
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
                if k in old_meta:
                    meta[k] = old_meta[k]
                else:
                    meta.pop(k, None)
            meta.pop("namespace", None)
            meta.pop("selfLink", None)
            meta["generation"] = old_meta.get("generation", 0)
            if spec != old["spec"]:
                meta["generation"] += 1
            _drop_disabled(spec, old["spec"], self.gates)
            errs = validate_slice(obj, old)
            if errs:
                raise _invalid_error(name, errs)
            meta["managedFields"] = old_meta.get("managedFields") or []
            meta["resourceVersion"] = old_meta["resourceVersion"]
            stored = _encode_slice(obj)
            if stored == cur:
                return copy.deepcopy(cur), warnings  # nothing changed: no write, no event
            entry = self._managed(manager, obj)
            mf = [e for e in meta["managedFields"] if e.get("manager") != manager or e.get("operation") != "Update"]
            stored["metadata"]["managedFields"] = mf + [entry]
            if dry_run:
                return stored, warnings
            stored["metadata"]["resourceVersion"] = str(self.bump())
            if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
                del self.slices[name]
                self.record("DELETED", cur, stored)
                return copy.deepcopy(stored), warnings
            self.slices[name] = stored
            self.record("MODIFIED", cur, stored)
            return copy.deepcopy(stored), warnings

    def patch_slice(self, name, content_type, body, strict=False, dry_run=False, manager=""):
        media = (content_type or "").split(";")[0].strip().lower()
        if media not in ("application/merge-patch+json", "application/strategic-merge-patch+json",
                         "application/json-patch+json"):
            raise APIError(415, "the body of the request was in an unknown format - accepted media types include: "
                                "application/json-patch+json, application/merge-patch+json, "
                                "application/apply-patch+yaml, application/strategic-merge-patch+json")
        try:
            patch = _loads(body or b"null")
        except ValueError as e:
            raise _bad_request("error decoding patch: %s" % e)
        with self.lock:
            cur = self.slices.get(name)
            if cur is None:
                raise _not_found(name)
            try:
                if media == "application/json-patch+json":
                    new = _json_patch(cur, patch)
                else:
                    if not isinstance(patch, dict):
                        raise ValueError("a merge patch must be a JSON object")
                    new = _merge_patch(cur, patch)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise APIError(422, "the server rejected our request due to an error in our request: %s" % e)
            return self.update_slice(name, new, strict, dry_run, manager)

    def delete_slice(self, name, options=None, dry_run=False, force=False):
        """(HTTP status, object): 200 with the deleted object, or 202 while finalizers hold it."""
        with self.lock:
            cur = self.slices.get(name)
            if cur is None:
                raise _not_found(name)
            meta = cur["metadata"]
            pre = (options or {}).get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise _conflict(name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                % (pre["uid"], meta["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise _conflict(name, "Precondition failed: ResourceVersion in precondition: %s, ResourceVersion "
                                      "in object meta: %s" % (pre["resourceVersion"], meta["resourceVersion"]))
            if meta.get("finalizers") and not force:
                if meta.get("deletionTimestamp"):
                    return 202, copy.deepcopy(cur)
                new = copy.deepcopy(cur)
                new["metadata"]["deletionTimestamp"] = _timestamp()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                if dry_run:
                    return 202, new
                new["metadata"]["resourceVersion"] = str(self.bump())
                self.slices[name] = new
                self.record("MODIFIED", cur, new)
                return 202, copy.deepcopy(new)
            final = copy.deepcopy(cur)
            if dry_run:
                return 200, final
            final["metadata"]["resourceVersion"] = str(self.bump())
            del self.slices[name]
            self.record("DELETED", cur, final)
            return 200, copy.deepcopy(final)

    # -- ResourceClaims ----------------------------------------------------------

    def _claim(self, namespace, name):
        cur = self.claims.get((namespace, name))
        if cur is None:
            raise _not_found(name, CLAIMS)
        return cur

    def _store_claim(self, cur, new, dry_run=False):
        """Writes a changed claim: a new resourceVersion and a MODIFIED event. A write that changes
        nothing (managedFields timestamps aside) is no write, as on a real server."""
        def same(a, b):
            strip = [dict(e, time=None) for e in a["metadata"].get("managedFields") or []]
            strip2 = [dict(e, time=None) for e in b["metadata"].get("managedFields") or []]
            return strip == strip2 and dict(a, metadata=dict(a["metadata"], managedFields=None)) \
                == dict(b, metadata=dict(b["metadata"], managedFields=None))
        if same(cur, new):
            return copy.deepcopy(cur)
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = str(self.bump())
        key = (new["metadata"]["namespace"], new["metadata"]["name"])
        self.claims[key] = new
        self.record("MODIFIED", cur, new, CLAIMS)
        return copy.deepcopy(new)

    def put_claim(self, obj):
        """Creates or replaces a claim unvalidated (the test's hand). A replacement with another
        uid is the old claim deleted and a new one created, as the watch shows it."""
        claim = copy.deepcopy(obj)
        claim.setdefault("apiVersion", API_VERSION)
        claim.setdefault("kind", CLAIM_KIND)
        meta = claim.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        if not meta.get("name"):
            raise ValueError("a claim needs metadata.name")
        key = (meta["namespace"], meta["name"])
        with self.lock:
            cur = self.claims.get(key)
            if cur is not None and meta.get("uid", cur["metadata"]["uid"]) == cur["metadata"]["uid"]:
                meta["uid"] = cur["metadata"]["uid"]
                meta.setdefault("creationTimestamp", cur["metadata"].get("creationTimestamp"))
                meta["resourceVersion"] = str(self.bump())
                self.claims[key] = claim
                self.record("MODIFIED", cur, claim, CLAIMS)
                return copy.deepcopy(claim)
            if cur is not None:
                self.delete_claim(*key)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _timestamp())
            meta["resourceVersion"] = str(self.bump())
            self.claims[key] = claim
            self.record("ADDED", None, claim, CLAIMS)
            return copy.deepcopy(claim)

    def delete_claim(self, namespace, name):
        with self.lock:
            cur = self.claims.pop((namespace, name), None)
            if cur is None:
                return None
            final = _with_rv(cur, str(self.bump()))
            self.record("DELETED", cur, final, CLAIMS)
            return copy.deepcopy(final)

    def patch_claim(self, namespace, name, content_type, body, manager, dry_run=False):
        """PATCH of the claim itself: a merge (or strategic merge, or JSON) patch that may change
        metadata; the spec is immutable and the status is reset, as resourceclaimStrategy does."""
        media = (content_type or "").split(";")[0].strip().lower()
        if media == "application/apply-patch+yaml":
            raise _bad_request("fakeapi: server-side apply is served on resourceclaims/{name}/status only")
        patch = self._patch_body(media, body)
        with self.lock:
            cur = self._claim(namespace, name)
            new = self._patched(cur, media, patch)
            if not isinstance(new.get("metadata"), dict):
                raise APIError(422, "the server rejected our request due to an error in our request: "
                                    "metadata must be an object")
            meta, old_meta = new["metadata"], cur["metadata"]
            errs = []
            for f in ("name", "namespace", "uid"):
                if meta.get(f, "") != old_meta.get(f, ""):
                    errs.append(_invalid("metadata." + f, meta.get(f, ""), "field is immutable"))
            if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
                raise _conflict(name, resource=CLAIMS)
            if new.get("spec") != cur.get("spec"):
                errs.append(_invalid("spec", _Shown(_dumps(new.get("spec"))), "field is immutable"))
            _check_meta(meta, errs)
            if errs:
                raise _invalid_error(name, errs, CLAIM_KIND)
            for f in ("uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp",
                      "managedFields"):
                if f in old_meta:
                    meta[f] = old_meta[f]
                else:
                    meta.pop(f, None)
            new["apiVersion"], new["kind"] = cur.get("apiVersion", API_VERSION), cur.get("kind", CLAIM_KIND)
            if "status" in cur:
                new["status"] = copy.deepcopy(cur["status"])
            else:
                new.pop("status", None)
            if new != cur:
                self._manage_update(new, manager, "", {"f:metadata": _fields_v1(new).get("f:metadata", {})})
            return self._store_claim(cur, new, dry_run)

    def _patch_body(self, media, body):
        if media not in ("application/merge-patch+json", "application/strategic-merge-patch+json",
                         "application/json-patch+json"):
            raise APIError(415, "the body of the request was in an unknown format - accepted media types include: "
                                "application/json-patch+json, application/merge-patch+json, "
                                "application/apply-patch+yaml, application/strategic-merge-patch+json")
        try:
            return _loads(body or b"null")
        except ValueError as e:
            raise _bad_request("error decoding patch: %s" % e)

    @staticmethod
    def _patched(cur, media, patch):
        try:
            if media == "application/json-patch+json":
                return _json_patch(cur, patch)
            if not isinstance(patch, dict):
                raise ValueError("a merge patch must be a JSON object")
            return _merge_patch(cur, patch)
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise APIError(422, "the server rejected our request due to an error in our request: %s" % e)

    @staticmethod
    def _manage_update(obj, manager, subresource, fields):
        """Records an Update by manager in managedFields (one entry per manager and subresource)."""
        mf = [e for e in obj["metadata"].get("managedFields") or []
              if not (e.get("manager") == manager and e.get("operation") == "Update"
                      and e.get("subresource", "") == subresource)]
        entry = {"manager": manager, "operation": "Update", "apiVersion": API_VERSION, "time": _timestamp(),
                 "fieldsType": "FieldsV1", "fieldsV1": fields}
        if subresource:
            entry["subresource"] = subresource
        obj["metadata"]["managedFields"] = mf + [entry]

    def update_claim_status(self, namespace, name, body, ident, manager, dry_run=False):
        """PUT resourceclaims/{name}/status."""
        if not isinstance(body, dict):
            raise _cannot_handle("json: cannot unmarshal %s into Go value of type struct" % _json_type(body),
                                 CLAIM_KIND)
        meta = body.get("metadata") or {}
        if meta.get("name", "") != name:
            raise _bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                               % (meta.get("name", ""), name))
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the "
                               "request")
        with self.lock:
            cur = self._claim(namespace, name)
            if meta.get("uid") and meta["uid"] != cur["metadata"]["uid"]:
                raise _conflict(name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                % (meta["uid"], cur["metadata"]["uid"]), CLAIMS)
            # A claim may be updated without a resourceVersion (AllowUnconditionalUpdate).
            if meta.get("resourceVersion") and meta["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                raise _conflict(name, resource=CLAIMS)
            return self._write_status(cur, body.get("status"), ident, "update", manager, dry_run)

    def patch_claim_status(self, namespace, name, content_type, body, ident, manager, field_manager, force,
                           dry_run=False):
        """PATCH resourceclaims/{name}/status: server-side apply of status.devices (force is the
        force=true query), or a merge or JSON patch of the status."""
        media = (content_type or "").split(";")[0].strip().lower()
        if media != "application/apply-patch+yaml":
            if force is not None:
                raise _invalid_error("", [_forbidden("force", "may not be specified for non-apply patch")],
                                     "PatchOptions", "meta.k8s.io")
            patch = self._patch_body(media, body)
            with self.lock:
                cur = self._claim(namespace, name)
                new = self._patched(cur, media, patch)
                if not isinstance(new, dict):
                    raise APIError(422, "the server rejected our request due to an error in our request")
                return self._write_status(cur, new.get("status"), ident, "patch", manager, dry_run)
        if not field_manager:
            raise _invalid_error("", [_required("fieldManager", "is required for apply patch")],
                                 "PatchOptions", "meta.k8s.io")
        try:
            obj = _loads(body or b"null")
        except ValueError as e:
            raise _bad_request("fakeapi: an apply patch must be JSON (which YAML includes): %s" % e)
        if not isinstance(obj, dict):
            raise _bad_request("error decoding YAML: the apply patch must be an object")
        if obj.get("apiVersion") != API_VERSION or obj.get("kind") != CLAIM_KIND:
            raise _bad_request('fakeapi: an apply patch of a claim needs apiVersion "%s" and kind "%s", not '
                               '"%s" and "%s"' % (API_VERSION, CLAIM_KIND, obj.get("apiVersion"), obj.get("kind")))
        meta = obj.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise _bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                               % (meta["name"], name))
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the "
                               "request")
        status = obj.get("status") or {}
        if not isinstance(status, dict):
            raise _cannot_handle("json: cannot unmarshal %s into Go struct field ResourceClaim.status of type "
                                 "v1.ResourceClaimStatus" % _json_type(status), CLAIM_KIND)
        with self.lock:
            cur = self._claim(namespace, name)
            for f, v in status.items():
                if f != "devices" and v != (cur.get("status") or {}).get(f):
                    raise _bad_request("fakeapi: server-side apply of a claim's status covers status.devices only, "
                                       "not status." + f)
            applied, warnings = _decode_device_statuses(status.get("devices"))
            devices, managed = _apply_devices(cur, applied, field_manager, bool(force))
            new_status = copy.deepcopy(cur.get("status") or {})
            new_status.pop("devices", None)
            if devices:
                new_status["devices"] = devices
            return self._write_status(cur, new_status, ident, "patch", None, dry_run, managed, warnings)

    def _write_status(self, cur, status, ident, verb, manager, dry_run, managed=None, warnings=()):
        """A status write as resourceclaimStatusStrategy makes it: spec and metadata kept, devices
        of deallocated devices dropped, the binding and per-driver permissions checked, status.devices
        validated; then stored, with a MODIFIED event."""
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise _cannot_handle("json: cannot unmarshal %s into Go struct field ResourceClaim.status of type "
                                 "v1.ResourceClaimStatus" % _json_type(status), CLAIM_KIND)
        status = copy.deepcopy(status)
        warnings = list(warnings)
        if "devices" in status and managed is None:
            status["devices"], w = _decode_device_statuses(status["devices"])
            warnings += w
            if not status["devices"]:
                del status["devices"]
        old = cur.get("status") or {}
        name, namespace = cur["metadata"]["name"], cur["metadata"]["namespace"]
        if not self.gates.get("DRAResourceClaimDeviceStatus") and not old.get("devices"):
            status.pop("devices", None)
        binding = status.get("allocation") != old.get("allocation") or \
            (status.get("reservedFor") or []) != (old.get("reservedFor") or [])
        if status.get("allocation") != old.get("allocation"):
            _drop_deallocated(status, old)
        errs = []
        if self.gates.get("DRAResourceClaimGranularStatusAuthorization"):
            # AuthorizedForBinding and AuthorizedForDeviceStatus (k8s.io/kubernetes/pkg/registry/resource).
            if binding and not ident.allows(verb, GROUP, CLAIMS + "/binding"):
                errs.append(_forbidden("status", BINDING_REFUSAL % (
                    verb, _forbidden_message(ident, verb, GROUP, CLAIMS + "/binding"))))
            node = _allocated_node(status)
            if node and _sa_node(ident) == node:
                verbs = [VERB_ASSOCIATED_NODE + verb, VERB_ARBITRARY_NODE + verb]
            else:
                verbs = [VERB_ARBITRARY_NODE + verb]
            for driver in _modified_drivers(status.get("devices"), old.get("devices")):
                if not any(ident.allows(v, GROUP, CLAIMS + "/driver", namespace, driver) for v in verbs):
                    errs.append(_forbidden("status.devices", DEVICE_STATUS_REFUSAL % (
                        "[" + " ".join(verbs) + "]",
                        _forbidden_message(ident, verbs[0], GROUP, CLAIMS + "/driver", namespace, driver))))
        errs += validate_device_statuses(status)
        if errs:
            raise _invalid_error(name, errs, CLAIM_KIND)
        new = copy.deepcopy(cur)
        if status:
            new["status"] = status
        else:
            new.pop("status", None)
        if managed is not None:
            new["metadata"]["managedFields"] = managed
        elif new != cur:
            fields = {"f:status": {"f:" + k: {} for k in sorted(status)}}
            self._manage_update(new, manager, "status", fields)
        return self._store_claim(cur, new, dry_run), warnings

    # -- Leases --------------------------------------------------------------------

    def _decode_lease(self, body, namespace, strict=False):
        if not isinstance(body, dict):
            raise _cannot_handle("json: cannot unmarshal %s into Go value of type struct" % _json_type(body),
                                 LEASE_KIND)
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version not in (None, "", COORDINATION + "/v1"):
            raise _bad_request("the API version in the data (%s) does not match the expected API version (%s)"
                               % (api_version, COORDINATION + "/v1"))
        if kind not in (None, "", LEASE_KIND):
            raise _cannot_handle('no kind "%s" is registered for version "%s/v1"' % (kind, COORDINATION), LEASE_KIND)
        dec = _Decoder(LEASE_KIND)
        obj = dec.decode(_LEASE, body, "")
        warnings = ['unknown field "%s"' % f for f in dec.unknown]
        if strict and warnings:
            raise _cannot_handle("strict decoding error: " + ", ".join(warnings), LEASE_KIND)
        meta = obj["metadata"]
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise _bad_request("the namespace of the provided object does not match the namespace sent on the "
                               "request")
        meta["namespace"] = namespace
        obj["apiVersion"], obj["kind"] = COORDINATION + "/v1", LEASE_KIND
        return obj, warnings

    def _lease_managed(self, manager, obj):
        spec = {"f:" + k: {} for k in sorted(obj["spec"])}
        return {"manager": manager, "operation": "Update", "apiVersion": COORDINATION + "/v1",
                "time": _timestamp(), "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": spec}}

    def create_lease(self, namespace, body, strict=False, dry_run=False, manager=""):
        obj, warnings = self._decode_lease(body, namespace, strict)
        meta = obj["metadata"]
        for k in ("selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "uid"):
            meta.pop(k, None)
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"][:58] + "".join(random.choice(_NAME_CHARS) for _ in range(5))
            errs = validate_lease(obj)
            if errs:
                raise _invalid_error(meta.get("name", ""), errs, LEASE_KIND, COORDINATION)
            if meta.get("resourceVersion"):
                raise APIError(500, "resourceVersion should not be set on objects to be created")
            key = (namespace, meta["name"])
            if key in self.leases:
                raise _already_exists(meta["name"], LEASES, COORDINATION)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _timestamp()
            meta["managedFields"] = [self._lease_managed(manager, obj)]
            stored = _encode(_LEASE, obj)
            if dry_run:
                return stored, warnings
            stored["metadata"]["resourceVersion"] = str(self.bump())
            self.leases[key] = stored
            self.record("ADDED", None, stored, LEASES)
            return copy.deepcopy(stored), warnings

    def update_lease(self, namespace, name, body, strict=False, dry_run=False, manager=""):
        """PUT: optimistic concurrency (a Lease allows no unconditional update), and a PUT of a
        missing Lease creates it (AllowCreateOnUpdate). Returns (code, object, warnings)."""
        obj, warnings = self._decode_lease(body, namespace, strict)
        meta = obj["metadata"]
        if meta.get("name", "") != name:
            raise _bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                               % (meta.get("name", ""), name))
        with self.lock:
            cur = self.leases.get((namespace, name))
            if cur is None:
                meta.pop("resourceVersion", None)
                stored, warnings = self.create_lease(namespace, body, strict, dry_run, manager)
                return 201, stored, warnings
            old_meta = cur["metadata"]
            if meta.get("uid") and meta["uid"] != old_meta["uid"]:
                raise _conflict(name, "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                % (meta["uid"], old_meta["uid"]), LEASES, COORDINATION)
            if not meta.get("resourceVersion"):
                raise _invalid_error(name, [_invalid("metadata.resourceVersion", 0, "must be specified for an update")],
                                     LEASES, COORDINATION)
            if meta["resourceVersion"] != old_meta["resourceVersion"]:
                raise _conflict(name, resource=LEASES, group=COORDINATION)
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if k in old_meta:
                    meta[k] = old_meta[k]
                else:
                    meta.pop(k, None)
            errs = validate_lease(obj)
            if errs:
                raise _invalid_error(name, errs, LEASES, COORDINATION)
            mf = [e for e in old_meta.get("managedFields") or [] if e.get("manager") != manager]
            meta["managedFields"] = old_meta.get("managedFields") or []
            stored = _encode(_LEASE, obj)
            if stored == cur:
                return 200, copy.deepcopy(cur), warnings
            stored["metadata"]["managedFields"] = mf + [self._lease_managed(manager, obj)]
            if dry_run:
                return 200, stored, warnings
            stored["metadata"]["resourceVersion"] = str(self.bump())
            self.leases[(namespace, name)] = stored
            self.record("MODIFIED", cur, stored, LEASES)
            return 200, copy.deepcopy(stored), warnings

    def delete_lease(self, namespace, name, dry_run=False):
        with self.lock:
            cur = self.leases.get((namespace, name))
            if cur is None:
                raise _not_found(name, LEASES, COORDINATION)
            if not dry_run:
                del self.leases[(namespace, name)]
                self.record("DELETED", cur, _with_rv(cur, str(self.bump())), LEASES)
            details = dict(_details(name, LEASES, COORDINATION), uid=cur["metadata"]["uid"])
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def list_slices(self, query):
        return self.list_objects(SLICES, query)

    def list_objects(self, resource, query, namespace=None):
        """A list as the real server returns it: one resourceVersion for the whole list,
        paging with limit and continue over a snapshot, selectors applied to each page."""
        res = _RESOURCES[resource]
        sel = _Selector(query, res.fields)
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise _bad_request("limit: Invalid value: %s" % json.dumps(query.get("limit")))
        token = query.get("continue")
        coll = self.objects[resource]
        with self.lock:
            if token:
                try:
                    t = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
                    rv, start = int(t["rv"]), t["start"].rstrip("\x00")
                except (ValueError, KeyError, TypeError, AttributeError):
                    raise _bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                                       "(version meta.k8s.io/v1)")
                if (resource, rv) not in self.snapshots:
                    raise APIError(410, "The provided continue parameter is too old to display a consistent list "
                                        "result. You can start a new list without the continue parameter, or use "
                                        "the continue token in this response to retrieve the remainder of the "
                                        "results. Continuing with the provided token results in an inconsistent "
                                        "list - objects that were created, modified, or deleted between the time "
                                        "the first chunk was returned and now may show up in the list.")
                everything = [(k, o) for k, o in self.snapshots[(resource, rv)] if k > start]
            else:
                rv = self.rv
                everything = [(_sort_key(k), coll[k]) for k in sorted(coll, key=_sort_key)]
            items = [(k, o) for k, o in everything if (namespace is None or o["metadata"].get("namespace")
                                                       == namespace) and sel.match(o)]
            listmeta = {"resourceVersion": str(rv)}
            if limit > 0 and len(items) > limit:
                if not token:
                    self.snapshots[(resource, rv)] = everything
                    while len(self.snapshots) > self.SNAPSHOTS:
                        self.snapshots.popitem(last=False)
                last = items[limit - 1][0]
                cont = {"v": "meta.k8s.io/v1", "rv": rv, "start": last + "\x00"}
                listmeta["continue"] = base64.urlsafe_b64encode(_dumps(cont).encode()).decode().rstrip("=")
                if sel.empty():
                    listmeta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
            out = []
            for _, o in items:
                o = copy.deepcopy(o)
                # Items of a list carry no apiVersion and kind, as the real server sends them.
                o.pop("apiVersion", None)
                o.pop("kind", None)
                out.append(o)
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": listmeta, "items": out}

    def open_watch(self, query, resource=SLICES, namespace=None):
        """Registers a watch and queues what it must send first. Returns (watch, expired message or None)."""
        sel = _Selector(query, _RESOURCES[resource].fields)
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        initial = _truthy(query.get("sendInitialEvents"))
        rv_param = query.get("resourceVersion") or ""
        if rv_param and not rv_param.isdigit():
            raise _bad_request('resourceVersion: Invalid value: "%s": must be a non-negative integer' % rv_param)
        coll = self.objects[resource]
        with self.lock:
            w = _Watch(sel, bookmarks, query, resource, namespace)
            if rv_param in ("", "0") or initial:
                for k in sorted(coll, key=_sort_key):
                    if w.sees(coll[k]):
                        w.q.put(("data", _event_line("ADDED", coll[k])))
                if initial and bookmarks:
                    w.q.put(("bookmark", self.rv, {"k8s.io/initial-events-end": "true"}))
            else:
                since = int(rv_param)
                if since < self.floor:
                    return None, "too old resource version: %d (%d)" % (since, self.floor)
                for rv, res, etype, old, new in self.history:
                    if rv > since:
                        w.offer(res, etype, old, new)
            self.watches.add(w)
            return w, None

    def close_watch(self, w):
        with self.lock:
            self.watches.discard(w)

    def tell_watches(self, item, only_bookmarks=False):
        with self.lock:
            for w in self.watches:
                if not only_bookmarks or w.bookmarks:
                    w.q.put(item if item[0] != "bookmark" else ("bookmark", self.rv, None))


# ---------------------------------------------------------------------------
# HTTP.

_SLICE_PATH = "/apis/resource.k8s.io/v1/resourceslices"
_CLAIM_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
_NS_PATH = "/apis/resource.k8s.io/v1/namespaces/"
_LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/"
_ROUTES = [
    ("node", re.compile(r"^/api/v1/nodes/([^/]+)$"), ("GET",)),
    ("nodes", re.compile(r"^/api/v1/nodes$"), ("GET",)),
    ("claims", re.compile(r"^/apis/resource\.k8s\.io/v1/resourceclaims$"), ("GET",)),
    ("nsclaims", re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims$"), ("GET",)),
    ("claim", re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$"),
     ("GET", "PATCH")),
    ("claimstatus", re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)/status$"),
     ("GET", "PUT", "PATCH")),
    ("slices", re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices$"), ("GET", "POST", "DELETE")),
    ("slice", re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices/([^/]+)$"), ("GET", "PUT", "PATCH", "DELETE")),
    ("leases", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases$"), ("POST",)),
    ("lease", re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases/([^/]+)$"),
     ("GET", "PUT", "DELETE")),
    ("version", re.compile(r"^/version/?$"), ("GET",)),
    ("health", re.compile(r"^/(healthz|readyz|livez)$"), ("GET",)),
    ("discovery", re.compile(r"^/(api|apis|apis/resource\.k8s\.io|apis/resource\.k8s\.io/v1"
                             r"|apis/coordination\.k8s\.io|apis/coordination\.k8s\.io/v1)/?$"), ("GET",)),
]
_PUBLIC = ("version", "health")  # what an anonymous user may read

# Per route: (API group, resource, {method: RBAC verb}); args give the namespace and name.
_AUTHZ = {
    "node": ("", "nodes", {"GET": "get"}),
    "nodes": ("", "nodes", {"GET": "list"}),
    "claims": (GROUP, CLAIMS, {"GET": "list"}),
    "nsclaims": (GROUP, CLAIMS, {"GET": "list"}),
    "claim": (GROUP, CLAIMS, {"GET": "get", "PATCH": "patch"}),
    "claimstatus": (GROUP, CLAIMS + "/status", {"GET": "get", "PUT": "update", "PATCH": "patch"}),
    "slices": (GROUP, SLICES, {"GET": "list", "POST": "create", "DELETE": "deletecollection"}),
    "slice": (GROUP, SLICES, {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}),
    "leases": (COORDINATION, LEASES, {"POST": "create"}),
    "lease": (COORDINATION, LEASES, {"GET": "get", "PUT": "update", "DELETE": "delete"}),
}


def _attributes(name, method, args, query):
    """The authorizer attributes of a resource request: (verb, group, resource, namespace, name).
    As the RequestInfoFactory does, a list or watch selecting metadata.name=X is for the name X."""
    group, resource, verbs = _AUTHZ[name]
    verb = verbs[method]
    namespaced = name in ("nsclaims", "claim", "claimstatus", "leases", "lease")
    namespace = args[0] if namespaced else ""
    rest = args[1:] if namespaced else args
    obj = rest[0] if rest else ""
    if verb == "list":
        if _truthy(query.get("watch")):
            verb = "watch"
        m = re.match(r"^metadata\.name==?([^,]*)$", query.get("fieldSelector") or "")
        if m:
            obj = m.group(1)
    return verb, group, resource, namespace, obj


def _discovery(path):
    path = path.rstrip("/")
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}

    def group_of(name):
        gv = name + "/v1"
        return {"name": name, "versions": [{"groupVersion": gv, "version": "v1"}],
                "preferredVersion": {"groupVersion": gv, "version": "v1"}}
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group_of(GROUP), group_of(COORDINATION)]}
    for g in (GROUP, COORDINATION):
        if path == "/apis/" + g:
            return dict({"kind": "APIGroup", "apiVersion": "v1"}, **group_of(g))
    if path == "/apis/%s/v1" % COORDINATION:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": COORDINATION + "/v1", "resources": [
            {"name": LEASES, "singularName": "lease", "namespaced": True, "kind": LEASE_KIND,
             "verbs": ["create", "delete", "get", "update"]}]}
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": [
        {"name": CLAIMS, "singularName": "resourceclaim", "namespaced": True, "kind": CLAIM_KIND,
         "verbs": ["get", "list", "patch", "watch"]},
        {"name": CLAIMS + "/status", "singularName": "", "namespaced": True, "kind": CLAIM_KIND,
         "verbs": ["get", "patch", "update"]},
        {"name": SLICES, "singularName": "resourceslice", "namespaced": False, "kind": SLICE_KIND,
         "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}]}


class _Stream:
    """What a watch request returns to the handler instead of a body."""

    def __init__(self, watch, expired, timeout):
        self.watch, self.expired, self.timeout = watch, expired, timeout
        self.how, self.ended = "error", None  # how and when it ended, for FakeAPI.watch_ends


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() closes connections itself; it must not wait on watch threads
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        if DEBUG:
            traceback.print_exc()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakeapi"
    disable_nagle_algorithm = True

    def setup(self):
        # The TLS handshake runs here, in the connection's own thread, so a
        # slow client cannot stall the accept loop.
        self.request.settimeout(10)
        self.request.do_handshake()
        self.request.settimeout(None)
        super().setup()
        self.server.api._connection(self.request, True)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.api._connection(self.request, False)

    def version_string(self):
        return self.server_version

    def log_message(self, fmt, *args):
        if DEBUG:
            sys.stderr.write("fakeapi: " + (fmt % args) + "\n")

    def do_GET(self):
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                if len(data) + size > MAX_BODY:
                    raise APIError(413, "Request entity too large: limit is %d" % MAX_BODY)
                data += self.rfile.read(size)
                self.rfile.readline(16)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise APIError(413, "Request entity too large: limit is %d" % MAX_BODY)
        return self.rfile.read(length) if length else b""

    def _serve(self):
        api = self.server.api
        split = urllib.parse.urlsplit(self.path)
        path = split.path
        query = dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))
        # user: who the token authenticated as, as an audit log names the client (a fleet's
        # nodes each have their own); t: when the request arrived.
        self._user = ""
        record = {"method": self.command, "path": path, "query": query, "status": None,
                  "user_agent": self.headers.get("User-Agent", ""), "t": time.monotonic(), "user": ""}
        try:
            try:
                body = self._read_body()
            except (ValueError, APIError) as e:
                self.close_connection = True  # the request stream is no longer in step
                raise e if isinstance(e, APIError) else _bad_request("malformed request body")
            api._before(self.command, self.path)
            result = self._route(api, path, query, body)
        except APIError as e:
            result = (e.code, e.status(), e.headers)
        except Exception as e:  # a bug in the fake itself: tell the client and the test
            api.internal_errors.append(traceback.format_exc())
            traceback.print_exc()
            result = (500, APIError(500, "fakeapi internal error: %r" % e).status(), [])
        record["user"] = self._user
        if isinstance(result, _Stream):
            record["status"] = 200
            api._record(record)
            self._stream(api, result)
            return
        code, obj, headers = result
        record["status"] = code
        api._record(record)
        self._respond(code, obj, headers)

    def _respond(self, code, obj, headers=()):
        if isinstance(obj, (bytes, str)):
            data, ctype = (obj if isinstance(obj, bytes) else obj.encode()), "text/plain; charset=utf-8"
        else:
            data, ctype = (_dumps(obj) + "\n").encode(), "application/json"
        headers = list(headers)
        encodings = [e.split(";")[0].strip().lower() for e in (self.headers.get("Accept-Encoding") or "").split(",")]
        if "gzip" in encodings and len(data) >= GZIP_MIN:
            data = gzip.compress(data)
            headers.append(("Content-Encoding", "gzip"))
        try:
            self.send_response(code)
            self.send_header("Audit-Id", str(uuid.uuid4()))
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", ctype)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _route(self, api, path, query, body):
        method = self.command
        for name, regex, methods in _ROUTES:
            m = regex.match(path)
            if m:
                break
        else:
            api._authenticate(self.headers.get("Authorization"), public=False)
            raise APIError(404, "the server could not find the requested resource", details={})
        ident = api._authenticate(self.headers.get("Authorization"), public=name in _PUBLIC)
        self._user = ident.user if ident is not None else "system:anonymous"
        if method not in methods:
            raise APIError(405, "the server does not allow this method on the requested resource", details={})
        args = [urllib.parse.unquote(g) for g in m.groups()]
        if name in _AUTHZ and ident is not None:
            attrs = _attributes(name, method, args, query)
            if not ident.allows(*attrs):
                raise _forbidden_error(ident, *attrs)
        store = api._store
        strict = query.get("fieldValidation") == "Strict"
        dry_run = query.get("dryRun") == "All"
        agent = self.headers.get("User-Agent", "")
        manager = query.get("fieldManager") or agent.split("/")[0][:128]

        def warn(warnings):
            return [("Warning", '299 - "%s"' % w.replace('"', '\\"')) for w in warnings] \
                if query.get("fieldValidation") != "Ignore" else []

        def parse(data, empty=None):
            if not data.strip():
                if empty is not None:
                    return empty
                raise _bad_request("the request body is empty")
            # No Content-Type means JSON; libcurl's default form encoding does not.
            media = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
            if media not in ("application/json", "application/yaml", "*/*"):
                raise APIError(415, "the body of the request was in an unknown format - accepted media types "
                                    "include: application/json, application/yaml, "
                                    "application/vnd.kubernetes.protobuf, application/cbor")
            try:
                return _loads(data)
            except ValueError as e:
                raise _bad_request("couldn't get version/kind; json parse error: %s" % e)

        accept = [a.split(";")[0].strip().lower() for a in (self.headers.get("Accept") or "").split(",")]
        if accept != [""] and not {"application/json", "application/*", "*/*", "application/yaml"} & set(accept) \
                and name not in ("health",):
            raise APIError(406, "only the following media types are accepted: application/json, "
                                "application/yaml, application/vnd.kubernetes.protobuf, application/cbor")

        if name == "version":
            return 200, {"major": "1", "minor": "36", "gitVersion": "v1.36.0", "gitCommit": "fakeapi",
                         "gitTreeState": "clean", "buildDate": "2026-04-22T00:00:00Z", "goVersion": "go1.25.0",
                         "compiler": "gc", "platform": "linux/amd64"}, []
        if name == "health":
            return 200, "ok", []
        if name == "discovery":
            return 200, _discovery(path), []
        if name == "node":
            with store.lock:
                node = store.nodes.get(args[0])
                if node is None:
                    raise _not_found(args[0], "nodes", "")
                return 200, copy.deepcopy(node), []
        if name == "nodes":
            with store.lock:
                items = [copy.deepcopy(store.nodes[n]) for n in sorted(store.nodes)]
                return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(store.rv)},
                             "items": items}, []
        def watch(resource, namespace=None):
            try:
                timeout = int(query.get("timeoutSeconds") or 0)
            except ValueError:
                raise _bad_request("timeoutSeconds: Invalid value: must be an integer")
            w, expired = store.open_watch(query, resource, namespace)
            return _Stream(w, expired, timeout)

        if name in ("claims", "nsclaims"):
            namespace = args[0] if name == "nsclaims" else None
            if _truthy(query.get("watch")):
                return watch(CLAIMS, namespace)
            return 200, store.list_objects(CLAIMS, query, namespace), []
        if name in ("claim", "claimstatus") and method == "GET":
            with store.lock:
                return 200, copy.deepcopy(store._claim(args[0], args[1])), []
        ctype = self.headers.get("Content-Type")
        if name == "claim":
            return 200, store.patch_claim(args[0], args[1], ctype, body, manager, dry_run), []
        if name == "claimstatus":
            if method == "PUT":
                obj, warnings = store.update_claim_status(args[0], args[1], parse(body), ident or _Identity(),
                                                          manager, dry_run)
            else:
                force = _truthy(query["force"]) if "force" in query else None
                obj, warnings = store.patch_claim_status(args[0], args[1], ctype, body, ident or _Identity(),
                                                         manager, query.get("fieldManager"), force, dry_run)
            return 200, obj, warn(warnings)
        if name == "leases":
            obj, warnings = store.create_lease(args[0], parse(body), strict, dry_run, manager)
            return 201, obj, warn(warnings)
        if name == "lease":
            if method == "GET":
                with store.lock:
                    obj = store.leases.get((args[0], args[1]))
                    if obj is None:
                        raise _not_found(args[1], LEASES, COORDINATION)
                    return 200, copy.deepcopy(obj), []
            if method == "PUT":
                code, obj, warnings = store.update_lease(args[0], args[1], parse(body), strict, dry_run, manager)
                return code, obj, warn(warnings)
            return 200, store.delete_lease(args[0], args[1], dry_run), []
        if name == "slices":
            if method == "GET" and _truthy(query.get("watch")):
                return watch(SLICES)
            if method == "GET":
                return 200, store.list_slices(query), []
            if method == "POST":
                obj, warnings = store.create_slice(parse(body), strict, dry_run, manager)
                return 201, obj, warn(warnings)
            sel = _Selector(query)
            options = parse(body, {})
            with store.lock:
                names = [n for n in sorted(store.slices) if sel.match(store.slices[n])]
                items = []
                for n in names:
                    _, obj = store.delete_slice(n, options, dry_run)
                    obj.pop("apiVersion", None)
                    obj.pop("kind", None)
                    items.append(obj)
                return 200, {"kind": "ResourceSliceList", "apiVersion": API_VERSION,
                             "metadata": {"resourceVersion": str(store.rv)}, "items": items}, []
        # name == "slice"
        if method == "GET":
            with store.lock:
                obj = store.slices.get(args[0])
                if obj is None:
                    raise _not_found(args[0])
                return 200, copy.deepcopy(obj), []
        if method == "PUT":
            obj, warnings = store.update_slice(args[0], parse(body), strict, dry_run, manager)
            return 200, obj, warn(warnings)
        if method == "PATCH":
            obj, warnings = store.patch_slice(args[0], self.headers.get("Content-Type"), body, strict, dry_run,
                                              manager)
            return 200, obj, warn(warnings)
        options = parse(body, {})
        if not isinstance(options, dict):
            raise _bad_request("DeleteOptions must be a JSON object")
        code, obj = store.delete_slice(args[0], options, dry_run)
        return code, obj, []

    def _stream(self, api, s):
        """Writes a watch as the apiserver does: chunked, one JSON event per chunk and line."""
        try:
            self.send_response(200)
            self.send_header("Audit-Id", str(uuid.uuid4()))
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            if s.watch:
                api._store.close_watch(s.watch)
            return
        clean = self._pump(api, s)
        if s.watch:
            api._store.close_watch(s.watch)
        split = urllib.parse.urlsplit(self.path)
        api._watch_ended({"user": self._user, "path": split.path, "how": s.how, "t": s.ended or time.monotonic(),
                          "query": dict(urllib.parse.parse_qsl(split.query, keep_blank_values=True))})
        if clean:
            try:
                self.wfile.write(b"0\r\n\r\n")
                return
            except OSError:
                pass
        self.close_connection = True

    def _chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _pump(self, api, s):
        """Sends events until the stream should end. True for a clean end (the
        terminating chunk follows), False when the connection must just close."""
        try:
            if s.expired:
                status = APIError(410, s.expired, reason="Expired").status()
                s.how, s.ended = "expired", time.monotonic()
                self._chunk(_event_line("ERROR", status))
                return True
            deadline = time.monotonic() + s.timeout if s.timeout > 0 else None
            while True:
                wait = 0.25
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        s.how, s.ended = "timeout", time.monotonic()
                        return True
                    wait = min(wait, left)
                try:
                    item = s.watch.q.get(timeout=wait)
                except queue.Empty:
                    # A client that hung up makes the socket readable; nothing
                    # else is ever sent on a watch connection.
                    if select.select([self.connection], [], [], 0)[0]:
                        s.how, s.ended = "hangup", time.monotonic()
                        return False
                    continue
                if item[0] == "data":
                    # Events queued together leave in one write (each still its own chunk);
                    # a short wait lets a burst gather, which spares wakeups and writes.
                    if s.watch.q.qsize() < 64:
                        time.sleep(0.002)
                    out = [b"%x\r\n%s\r\n" % (len(item[1]), item[1])]
                    size = len(out[0])
                    while size < 256 * 1024:
                        try:
                            item = s.watch.q.get_nowait()
                        except queue.Empty:
                            item = None
                            break
                        if item[0] != "data":
                            break
                        out.append(b"%x\r\n%s\r\n" % (len(item[1]), item[1]))
                        size += len(out[-1])
                        item = None
                    self.wfile.write(b"".join(out))
                    if item is None:
                        continue
                if item[0] == "bookmark":
                    meta = {"resourceVersion": str(item[1])}
                    if item[2]:
                        meta["annotations"] = item[2]
                    self._chunk(_event_line("BOOKMARK", {"kind": s.watch.kind, "apiVersion": s.watch.api_version,
                                                         "metadata": meta}))
                elif item[0] == "end":
                    s.how, s.ended = "end", time.monotonic()
                    return True
                elif item[0] == "expired":
                    s.how, s.ended = "expired", time.monotonic()
                    self._chunk(_event_line("ERROR", APIError(410, item[1], reason="Expired").status()))
                    return True
                else:  # "close": the server is going away
                    s.how, s.ended = "close", time.monotonic()
                    return False
        except (OSError, ValueError):
            return False


# ---------------------------------------------------------------------------
# Certificates.

def _openssl(*args):
    r = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr.strip()))


def _make_certificates(workdir):
    """A CA and a server certificate for 127.0.0.1 and localhost, signed by it."""
    ca_key, ca_crt = os.path.join(workdir, "ca.key"), os.path.join(workdir, "ca.crt")
    key, csr, crt = (os.path.join(workdir, "server." + x) for x in ("key", "csr", "crt"))
    ext = os.path.join(workdir, "server.ext")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", ca_key, "-out", ca_crt, "-days", "3650", "-subj", "/CN=fakeapi-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-set_serial",
             "0x" + secrets.token_hex(8), "-days", "3650", "-out", crt, "-extfile", ext)
    for p in (ca_key, key):
        os.chmod(p, 0o600)
    return ca_crt, crt, key


# ---------------------------------------------------------------------------
# The fake server.

class FakeAPI:
    """A fake kube-apiserver on 127.0.0.1 for one test. See the module docstring."""

    def __init__(self, workdir, tokens=("t0",), gates=None, anonymous=False):
        """workdir: where the CA, the server certificate and its key are written.
        tokens: the accepted bearer tokens: a list (each may do everything), or a
        table token -> identity, where an identity is None (may do everything) or
        {"user": "system:serviceaccount:NS:NAME", "groups": [...],
         "extra": {"authentication.kubernetes.io/node-name": ["node-a"]},
         "rules": [{"resource": "resourceclaims/driver", "verbs": ["associated-node:patch"],
                    "resourceNames": ["cpu.nrm.io"], "namespace": "ns1", "apiGroups": [...]}, ...]}
        (every key optional; a rule without "namespace" is bound cluster-wide, without
        "apiGroups" it is in its resource's group; "*" matches any verb or resource).
        gates: feature gates overriding DEFAULT_GATES. anonymous: a request without
        a token is the anonymous user (403 on resources, as with
        --anonymous-auth=true) instead of 401."""
        os.makedirs(workdir, exist_ok=True)
        self.workdir = os.path.abspath(workdir)
        self.ca_path, self._cert, self._key = _make_certificates(self.workdir)
        self._gates = dict(DEFAULT_GATES)
        self._store = _Store(self._gates)
        self.set_gates(gates or {})
        self._tokens = self._token_table(tokens)
        self._anonymous = anonymous
        self._requests = []
        self._rules = []
        self._conns = set()
        self._server = None
        self._thread = None
        self.port = None
        self.internal_errors = []  # tracebacks of bugs in the fake, for tests to assert on
        self._watch_ends = []

    # -- lifecycle ---------------------------------------------------------------

    @property
    def url(self):
        return "https://127.0.0.1:%d" % self.port if self.port else None

    def start(self, port=0):
        """Listens on 127.0.0.1:port (0: a free port) and serves in a thread."""
        if self._server:
            raise RuntimeError("already started")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._cert, self._key)
        ctx.set_alpn_protocols(["http/1.1"])
        deadline = time.monotonic() + 10
        while True:
            srv = _Server(("127.0.0.1", port), _Handler, bind_and_activate=False)
            try:
                srv.server_bind()
                break
            except OSError:
                srv.socket.close()
                if port == 0 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
        srv.server_activate()
        srv.api = self
        self._server = srv
        self.port = srv.server_address[1]
        self._thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fakeapi", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stops listening and closes every connection, open watches included."""
        srv, self._server = self._server, None
        if srv is None:
            return
        srv.shutdown()
        srv.server_close()
        self._store.tell_watches(("close",))
        with self._store.lock:
            conns = list(self._conns)
        for c in conns:
            try:
                socket.socket.shutdown(c, socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            with self._store.lock:
                if not self._conns:
                    break
            time.sleep(0.01)

    def restart(self):
        """Closes every connection and listens again on the same port; the store is kept."""
        port = self.port
        self.stop()
        self.start(port=port)

    def __enter__(self):
        return self.start() if not self._server else self

    def __exit__(self, *exc):
        self.stop()

    def write_kubeconfig(self, path, token=None, token_file=None, ca_data=False):
        """Writes a kubeconfig for this server. token: the user's token (default:
        the first accepted one). token_file: set user.tokenFile to this path
        instead, and write the token there unless token is None and the file
        exists. ca_data: embed the CA as certificate-authority-data."""
        if self.port is None:
            raise RuntimeError("start the server first")
        default = next(iter(self._tokens), "")
        cluster = [("server", self.url)]
        if ca_data:
            with open(self.ca_path, "rb") as f:
                cluster.append(("certificate-authority-data", base64.b64encode(f.read()).decode()))
        else:
            cluster.append(("certificate-authority", self.ca_path))
        if token_file is not None:
            user = [("tokenFile", os.path.abspath(token_file))]
            if token is not None or not os.path.exists(token_file):
                _write_atomic(token_file, (token if token is not None else default) + "\n")
        else:
            user = [("token", token if token is not None else default)]
        lines = ["apiVersion: v1", "kind: Config", "clusters:", "- name: fakeapi", "  cluster:"]
        lines += ["    %s: %s" % (k, json.dumps(v)) for k, v in cluster]
        lines += ["contexts:", "- name: fakeapi", "  context:", "    cluster: fakeapi", "    user: fakeapi",
                  "current-context: fakeapi", "users:", "- name: fakeapi", "  user:"]
        lines += ["    %s: %s" % (k, json.dumps(v)) for k, v in user]
        lines += ["preferences: {}", ""]
        _write_atomic(path, "\n".join(lines))
        return path

    # -- state seen by the test ----------------------------------------------------

    def add_node(self, name, labels=None):
        """Adds a Node (or returns the uid of an existing one), with labels beside the
        kubernetes.io ones."""
        with self._store.lock:
            node = self._store.nodes.get(name)
            if node is None:
                node = {"kind": "Node", "apiVersion": "v1",
                        "metadata": {"name": name, "uid": str(uuid.uuid4()),
                                     "resourceVersion": str(self._store.bump()), "creationTimestamp": _timestamp(),
                                     "labels": dict({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
                                                    **(labels or {}))},
                        "spec": {}, "status": {}}
                self._store.nodes[name] = node
            return node["metadata"]["uid"]

    def delete_node(self, name):
        with self._store.lock:
            self._store.nodes.pop(name, None)
            self._store.bump()

    def put_claim(self, obj):
        """Stores (creates or replaces) a resource.k8s.io/v1 ResourceClaim unvalidated, as another
        client would have written it; returns the stored copy. The resourceVersion is bumped and
        watches see ADDED, or MODIFIED (a claim with the same name and uid, or none given), or
        DELETED then ADDED (another uid: the claim was recreated)."""
        return self._store.put_claim(obj)

    def get_claim(self, namespace, name):
        with self._store.lock:
            obj = self._store.claims.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def claims(self, namespace=None):
        """Deep copies of the stored claims (of one namespace), sorted by namespace and name."""
        with self._store.lock:
            return [copy.deepcopy(self._store.claims[k]) for k in sorted(self._store.claims)
                    if namespace is None or k[0] == namespace]

    def modify_claim(self, namespace, name, fn):
        """fn(obj) mutates a copy of the stored claim (labels, status, anything), which replaces it
        unvalidated: the resourceVersion is bumped and MODIFIED emitted. Returns the new claim."""
        with self._store.lock:
            new = copy.deepcopy(self._store._claim(namespace, name))
            fn(new)
            new["metadata"]["namespace"], new["metadata"]["name"] = namespace, name
            return self._store.put_claim(new)

    def update_claim_status(self, namespace, name, status):
        """Replaces the claim's status (the scheduler allocating, a controller writing conditions),
        unvalidated; bumps the resourceVersion, emits MODIFIED and returns the claim."""
        def f(obj):
            if status is None:
                obj.pop("status", None)
            else:
                obj["status"] = copy.deepcopy(status)
        return self.modify_claim(namespace, name, f)

    def delete_claim(self, namespace, name):
        """Deletes a claim (DELETED for its watches); returns its last state, or None."""
        return self._store.delete_claim(namespace, name)

    def leases(self, namespace=None):
        with self._store.lock:
            return [copy.deepcopy(self._store.leases[k]) for k in sorted(self._store.leases)
                    if namespace is None or k[0] == namespace]

    def get_lease(self, namespace, name):
        with self._store.lock:
            obj = self._store.leases.get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def put_lease(self, obj):
        """Creates a coordination.k8s.io/v1 Lease (validated), as another client would; returns it."""
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        return self._store.create_lease(ns, obj, manager="test")[0]

    @staticmethod
    def _token_table(tokens):
        if isinstance(tokens, dict):
            return {t: _Identity.of(e) for t, e in tokens.items()}
        return {t: _Identity() for t in tokens}

    def set_tokens(self, tokens):
        """The bearer tokens accepted from now on: a list, or a table as the constructor takes."""
        table = self._token_table(tokens)
        with self._store.lock:
            self._tokens = table

    def set_gates(self, gates):
        """Overrides feature gates (see DEFAULT_GATES) from now on."""
        unknown = set(gates) - set(DEFAULT_GATES)
        if unknown:
            raise ValueError("unknown feature gates: " + ", ".join(sorted(unknown)))
        with self._store.lock:
            self._gates.update(gates)

    @property
    def gates(self):
        with self._store.lock:
            return dict(self._gates)

    @property
    def resource_version(self):
        with self._store.lock:
            return str(self._store.rv)

    def slices(self):
        """Deep copies of the current ResourceSlices, sorted by name."""
        with self._store.lock:
            return [copy.deepcopy(self._store.slices[n]) for n in sorted(self._store.slices)]

    def get_slice(self, name):
        with self._store.lock:
            obj = self._store.slices.get(name)
            return copy.deepcopy(obj) if obj else None

    def add_slice(self, obj):
        """Creates a slice as another client would (validation, gates, defaulting); returns it."""
        return self._store.create_slice(obj, manager="test")[0]

    def delete_slice(self, name):
        """Deletes a slice as another client would (finalizers ignored); emits DELETED."""
        return self._store.delete_slice(name, force=True)[1]

    def modify_slice(self, name, fn):
        """fn(obj) mutates a copy of the stored slice, which replaces it unvalidated:
        the resourceVersion is bumped (and the generation when the spec changed), MODIFIED is emitted."""
        with self._store.lock:
            cur = self._store.slices[name]
            new = copy.deepcopy(cur)
            fn(new)
            new["metadata"]["name"] = name
            if new.get("spec") != cur.get("spec"):
                new["metadata"]["generation"] = cur["metadata"].get("generation", 0) + 1
            new["metadata"]["resourceVersion"] = str(self._store.bump())
            self._store.slices[name] = new
            self._store.record("MODIFIED", cur, new)
            return copy.deepcopy(new)

    # -- faults ----------------------------------------------------------------

    def fail_next(self, n, code=500, method=None, path_contains=None):
        """The next n matching requests get this HTTP status with a Status body
        (and Retry-After: 1 for 429). path_contains matches the path and query."""
        with self._store.lock:
            self._rules.append({"kind": "fail", "n": n, "code": code, "method": method, "path": path_contains})

    def delay_next(self, n, seconds, method=None, path_contains=None):
        """The next n matching requests are held this long, then served as usual
        (a write still happens, even if its client gave up)."""
        with self._store.lock:
            self._rules.append({"kind": "delay", "n": n, "seconds": seconds, "method": method,
                                "path": path_contains})

    def end_watches(self):
        """Ends every open watch cleanly, as the server's watch timeout does."""
        self._store.tell_watches(("end",))

    def expire(self):
        """Forgets the event history and list snapshots, as a compaction does: a watch that resumes
        from any resourceVersion handed out before this call gets 410 Expired, as does a continue token."""
        self._store.expire()

    def expire_watches(self):
        """Expires the history (as expire() does) and ends every open watch with an ERROR event
        410 Expired, as an API server whose watch cache fell behind does: every watcher must list again."""
        self._store.expire()
        with self._store.lock:
            floor = self._store.floor
        self._store.tell_watches(("expired", "too old resource version: %d" % floor))

    def bookmark(self):
        """Sends a BOOKMARK at the current resourceVersion to every watch that allows bookmarks."""
        self._store.tell_watches(("bookmark",), only_bookmarks=True)

    def open_watches(self):
        """The query parameters of each open watch."""
        with self._store.lock:
            return [dict(w.query) for w in self._store.watches]

    # -- request log -------------------------------------------------------------

    @property
    def requests(self):
        """Every request answered so far: {method, path, query, status, user_agent, t, user}
        (t: time.monotonic() when it arrived; user: whom its token authenticated, "" for none)."""
        with self._store.lock:
            return copy.deepcopy(self._requests)

    @property
    def watch_ends(self):
        """Every watch ended so far: {user, path, query, how, t}; t: when the server decided to
        end it (before it sent the last event or closed); how: "expired" (an ERROR
        410 was its last event), "end" (end_watches), "timeout" (timeoutSeconds), "close" (the
        server stopped), "hangup" (the client left) or "error" (the connection broke)."""
        with self._store.lock:
            return copy.deepcopy(self._watch_ends)

    def writes(self):
        return [r for r in self.requests if r["method"] in ("POST", "PUT", "PATCH", "DELETE")]

    def clear_requests(self):
        with self._store.lock:
            self._requests = []

    @staticmethod
    def wait_for(pred, timeout=10.0, interval=0.02):
        """Polls pred() until it is true (returns True) or the timeout passes (returns False)."""
        deadline = time.monotonic() + timeout
        while True:
            if pred():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval)

    # -- used by the handler -------------------------------------------------------

    def _connection(self, conn, add):
        with self._store.lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def _watch_ended(self, record):
        with self._store.lock:
            self._watch_ends.append(record)

    def _record(self, record):
        if DEBUG:
            sys.stderr.write("fakeapi: %s %s %s -> %s\n" % (record["method"], record["path"],
                                                              urllib.parse.urlencode(record["query"]),
                                                              record["status"]))
        with self._store.lock:
            self._requests.append(record)

    def _take(self, kind, method, target):
        with self._store.lock:
            for rule in self._rules:
                if rule["kind"] != kind or rule["n"] <= 0:
                    continue
                if rule["method"] and rule["method"].upper() != method:
                    continue
                if rule["path"] and rule["path"] not in target:
                    continue
                rule["n"] -= 1
                return rule
        return None

    def _before(self, method, target):
        rule = self._take("delay", method, target)
        if rule:
            time.sleep(rule["seconds"])
        rule = self._take("fail", method, target)
        if rule:
            code = rule["code"]
            headers = [("Retry-After", "1")] if code in (429, 503) else []
            details = {"retryAfterSeconds": 1} if code == 429 else None
            raise APIError(code, _INJECTED_MESSAGES.get(code, "injected failure"), details=details, headers=headers)

    def _authenticate(self, header, public):
        """The identity of the request's bearer token (None: the anonymous user on a public path)."""
        with self._store.lock:
            tokens = dict(self._tokens)
        if not header:
            if self._anonymous:
                if public:
                    return None
                raise APIError(403, 'forbidden: User "system:anonymous" cannot access this resource',
                               details={})
            raise APIError(401, "Unauthorized")
        parts = header.strip().split(" ", 1)
        token = parts[1].strip() if len(parts) == 2 and parts[0].lower() == "bearer" else ""
        found = None
        for t, ident in tokens.items():
            if token and hmac.compare_digest(token.encode(), t.encode()):
                found = ident
        if found is None:
            raise APIError(401, "Unauthorized")
        return found


def _write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".fakeapi.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# Self-test.

class _Client:
    """A keep-alive HTTPS client that trusts only the fake's CA."""

    def __init__(self, api, token="t0", agent="selftest/1.0"):
        self.api, self.token, self.agent = api, token, agent
        self.ctx = ssl.create_default_context(cafile=api.ca_path)
        self.conn = None

    def connect(self, timeout=10):
        self.close()
        self.conn = http.client.HTTPSConnection("127.0.0.1", self.api.port, context=self.ctx, timeout=timeout)
        return self.conn

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None

    def req(self, method, path, body=None, token=None, headers=None, timeout=10, ctype="application/json"):
        """(status, headers, decoded JSON or text)."""
        if self.conn is None or self.conn.timeout != timeout:
            self.connect(timeout)
        hdrs = {"User-Agent": self.agent, "Accept": "application/json"}
        tok = self.token if token is None else token
        if tok:
            hdrs["Authorization"] = "Bearer " + tok
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else _dumps(body).encode()
            hdrs["Content-Type"] = ctype
        hdrs.update(headers or {})
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if attempt:
                    raise
                self.connect(timeout)
        try:
            out = json.loads(raw)
        except ValueError:
            out = raw.decode(errors="replace")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, out


class _RawWatch:
    """Reads a watch stream chunk by chunk, to check the framing as well as the events."""

    def __init__(self, api, query, token="t0", path=_SLICE_PATH):
        ctx = ssl.create_default_context(cafile=api.ca_path)
        raw = socket.create_connection(("127.0.0.1", api.port), timeout=10)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self.f = self.sock.makefile("rb")
        self.send(query, token, path)

    def send(self, query, token="t0", path=_SLICE_PATH):
        req = "GET %s?%s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: selftest-watch/1.0\r\n" % (path, query)
        if token:
            req += "Authorization: Bearer %s\r\n" % token
        self.sock.sendall((req + "\r\n").encode())
        self.status = int(self.f.readline().split()[1])
        self.headers = {}
        while True:
            line = self.f.readline().decode().strip()
            if not line:
                break
            k, v = line.split(":", 1)
            self.headers[k.strip().lower()] = v.strip()

    def next(self, timeout=5.0):
        """An event dict, "END" for the terminating chunk, "EOF" for a connection closed without it, None on timeout."""
        self.sock.settimeout(timeout)
        try:
            line = self.f.readline()
        except (socket.timeout, TimeoutError):
            return None
        except (OSError, ValueError):
            return "EOF"
        if not line:
            return "EOF"
        size = int(line.strip(), 16)
        if size == 0:
            self.f.readline()
            return "END"
        data = self.f.read(size)
        self.f.readline()
        if not data.endswith(b"\n") or data.count(b"\n") != 1:
            raise AssertionError("a watch chunk must hold exactly one event line: %r" % data)
        return json.loads(data)

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass


class _Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   " + name)
        else:
            self.failed += 1
            print("FAIL " + name + (": " + str(detail) if detail != "" else ""))
        sys.stdout.flush()
        return ok

    def section(self, name, fn, *args):
        try:
            fn(self, *args)
        except Exception:
            self(name + " (raised)", False, traceback.format_exc())


def _device(name="cpu0", **extra):
    d = {"name": name, "attributes": {"numaNode": {"int": 0}}, "capacity": {"cpus": {"value": "4"}}}
    d.update(extra)
    return d


def _slice_body(name=None, generate=None, node="node-a", driver="cpu.example.com", devices=None, **spec):
    meta = {}
    if name:
        meta["name"] = name
    if generate:
        meta["generateName"] = generate
    s = {"driver": driver, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "nodeName": node,
         "devices": [_device()] if devices is None else devices}
    s.update(spec)
    return {"apiVersion": API_VERSION, "kind": SLICE_KIND, "metadata": meta, "spec": s}


def _test_basics(t, api, c):
    st, _, body = c.req("GET", "/api/v1/nodes/node-a", token="")
    t("401 without a token", st == 401 and body.get("reason") == "Unauthorized" and body.get("kind") == "Status"
      and body.get("status") == "Failure" and body.get("code") == 401, body)
    st, _, body = c.req("GET", "/api/v1/nodes/node-a", token="wrong")
    t("401 with a wrong token", st == 401, st)
    uid = api.add_node("node-a")
    st, _, body = c.req("GET", "/api/v1/nodes/node-a")
    t("node get", st == 200 and body["kind"] == "Node" and body["apiVersion"] == "v1"
      and body["metadata"]["uid"] == uid and body["metadata"]["resourceVersion"].isdigit(), body)
    st, _, body = c.req("GET", "/api/v1/nodes/nope")
    t("node 404", st == 404 and body["reason"] == "NotFound" and body["message"] == 'nodes "nope" not found', body)
    claim = api.put_claim({"metadata": {"name": "c1", "namespace": "ns1"}, "spec": {"devices": {}},
                           "status": {"allocation": {"devices": {"results": []}}}})
    st, _, body = c.req("GET", "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1")
    t("claim get", st == 200 and body["metadata"]["uid"] == claim["metadata"]["uid"]
      and body["kind"] == "ResourceClaim" and "allocation" in body["status"], body)
    st, _, body = c.req("GET", "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c2")
    t("claim 404", st == 404 and body["reason"] == "NotFound"
      and body["message"] == 'resourceclaims.resource.k8s.io "c2" not found', body)
    st, _, body = c.req("GET", "/apis/nothing/here")
    t("unknown path 404", st == 404 and body["reason"] == "NotFound", body)
    st, _, body = c.req("POST", _SLICE_PATH + "/x", body={})
    t("wrong method 405", st == 405 and body["reason"] == "MethodNotAllowed", body)
    st, _, body = c.req("GET", "/version")
    t("version", st == 200 and body["minor"] == "36", body)
    st, _, body = c.req("POST", _SLICE_PATH, _slice_body(name="form"), ctype="application/x-www-form-urlencoded")
    t("a body that is not JSON by its Content-Type: 415", st == 415 and body["reason"] == "UnsupportedMediaType",
      body)
    st, _, body = c.req("GET", "/api/v1/nodes/node-a", headers={"Accept": "application/vnd.kubernetes.protobuf"})
    t("an Accept without JSON: 406", st == 406 and body["reason"] == "NotAcceptable", body)
    st, _, body = c.req("POST", _SLICE_PATH, b'{"metadata": {"name": NaN}}')
    t("NaN in a body: 400", st == 400, body)
    # Keep-alive: several requests on one connection.
    c.connect()
    sock = None
    same = True
    for _ in range(5):
        st, _, _ = c.req("GET", "/api/v1/nodes/node-a")
        sock = sock or c.conn.sock
        same &= c.conn.sock is sock and st == 200
    t("keep-alive reuses one connection", same)


def _test_create_list(t, api, c):
    st, _, body = c.req("POST", _SLICE_PATH, _slice_body(generate="00000-cpu.example.com-node-a-"))
    name = body.get("metadata", {}).get("name", "")
    generated = re.match(r"^00000-cpu\.example\.com-node-a-[%s]{5}$" % _NAME_CHARS, name)
    t("create with generateName", st == 201 and generated is not None
      and body["metadata"]["generation"] == 1 and body["metadata"]["uid"]
      and body["metadata"]["resourceVersion"].isdigit() and body["metadata"]["creationTimestamp"].endswith("Z"), body)
    t("created object is stored", api.get_slice(name) == body)
    st, _, body = c.req("POST", _SLICE_PATH, _slice_body(generate="x" * 70))
    t("generateName is cut to 58 characters", st == 201 and len(body["metadata"]["name"]) == 63, body)
    c.req("DELETE", _SLICE_PATH + "/" + body["metadata"]["name"])
    st, _, body = c.req("POST", _SLICE_PATH, _slice_body(name="fixed"))
    st2, _, body2 = c.req("POST", _SLICE_PATH, _slice_body(name="fixed"))
    t("create twice: 409 AlreadyExists", st == 201 and st2 == 409 and body2["reason"] == "AlreadyExists"
      and body2["message"] == 'resourceslices.resource.k8s.io "fixed" already exists', body2)
    bad = _slice_body(name="with-rv")
    bad["metadata"]["resourceVersion"] = "5"
    st, _, body = c.req("POST", _SLICE_PATH, bad)
    t("create with a resourceVersion: 500", st == 500
      and body["message"] == "resourceVersion should not be set on objects to be created", body)
    c.req("POST", _SLICE_PATH, _slice_body(name="b-mem", node="node-b", driver="memory.example.com"))
    c.req("POST", _SLICE_PATH, _slice_body(name="b-cpu", node="node-b", driver="cpu.example.com"))
    c.req("POST", _SLICE_PATH, _slice_body(name="all", driver="memory.example.com", nodeName=None, allNodes=True))

    def names(query):
        st, _, body = c.req("GET", _SLICE_PATH + "?" + query)
        return st, body, [i["metadata"]["name"] for i in body.get("items", [])]

    st, body, got = names("fieldSelector=spec.nodeName%3Dnode-b")
    t("list by spec.nodeName", st == 200 and got == ["b-cpu", "b-mem"] and body["kind"] == "ResourceSliceList"
      and body["apiVersion"] == API_VERSION and body["metadata"]["resourceVersion"] == api.resource_version, body)
    t("list items carry no apiVersion and kind", all("kind" not in i and "apiVersion" not in i
                                                     for i in body["items"]))
    st, body, got = names("fieldSelector=" + urllib.parse.quote("spec.nodeName=node-b,spec.driver=memory.example.com"))
    t("list by spec.nodeName and spec.driver", got == ["b-mem"], got)
    st, body, got = names("fieldSelector=" + urllib.parse.quote("spec.driver=memory.example.com"))
    t("list by spec.driver", got == ["all", "b-mem"], got)
    st, body, got = names("fieldSelector=" + urllib.parse.quote("spec.driver!=memory.example.com,metadata.name=fixed"))
    t("list with != and metadata.name", got == ["fixed"], got)
    api.modify_slice("b-mem", lambda o: o["metadata"].update(labels={"tier": "fast", "zone": "a"}))
    api.modify_slice("b-cpu", lambda o: o["metadata"].update(labels={"tier": "slow"}))
    st, body, got = names("labelSelector=" + urllib.parse.quote("tier in (fast,slow),!zone"))
    st2, body2, got2 = names("labelSelector=" + urllib.parse.quote("tier=fast,zone"))
    t("list by label selector", got == ["b-cpu"] and got2 == ["b-mem"], (got, got2))
    st, body, got = names("fieldSelector=spec.pool.foo%3Dx")
    t("unsupported field selector: 400", st == 400 and body["message"] == "field label not supported: spec.pool.foo",
      body)


def _test_paging(t, api, c):
    for i in range(5):
        c.req("POST", _SLICE_PATH, _slice_body(name="page-%d" % i, node="node-p"))
    q = "fieldSelector=spec.nodeName%3Dnode-p&limit=2"
    seen, rvs, pages, cont = [], set(), 0, None
    while True:
        st, _, body = c.req("GET", _SLICE_PATH + "?" + q + ("&continue=" + cont if cont else ""))
        if st != 200:
            break
        pages += 1
        seen += [i["metadata"]["name"] for i in body["items"]]
        rvs.add(body["metadata"]["resourceVersion"])
        cont = body["metadata"].get("continue")
        if pages == 1:
            c.req("POST", _SLICE_PATH, _slice_body(name="page-9", node="node-p"))  # after the snapshot
        if not cont:
            break
    t("paging with limit and continue", st == 200 and pages == 3 and seen == ["page-%d" % i for i in range(5)]
      and len(rvs) == 1, (st, pages, seen, rvs))
    c.req("POST", _SLICE_PATH, _slice_body(name="big", devices=_many(128, attributes={
        "s%d" % i: {"string": "x" * 60} for i in range(31)})))
    st, hdrs, raw = c.req("GET", _SLICE_PATH, headers={"Accept-Encoding": "gzip"})
    st2, hdrs2, _ = c.req("GET", _SLICE_PATH)
    c.req("DELETE", _SLICE_PATH + "/big")
    t("a large list is gzipped only for a client that accepts it", st == 200 and hdrs.get("content-encoding")
      == "gzip" and st2 == 200 and "content-encoding" not in hdrs2, hdrs)
    st, _, body = c.req("GET", _SLICE_PATH + "?limit=1")
    t("remainingItemCount without selectors", st == 200 and body["metadata"]["remainingItemCount"]
      == len(api.slices()) - 1 and body["metadata"].get("continue"), body["metadata"])
    cont = body["metadata"]["continue"]
    api.expire()
    st, _, body = c.req("GET", _SLICE_PATH + "?limit=1&continue=" + cont)
    t("continue after expiry: 410", st == 410 and body["reason"] == "Expired", body)


def _test_update_delete(t, api, c):
    st, _, cur = c.req("POST", _SLICE_PATH, _slice_body(name="upd"))
    rv0 = cur["metadata"]["resourceVersion"]
    stale = copy.deepcopy(cur)
    cur["spec"]["devices"][0]["attributes"]["numaNode"]["int"] = 1
    st, _, new = c.req("PUT", _SLICE_PATH + "/upd", cur)
    t("update with the current resourceVersion", st == 200 and int(new["metadata"]["resourceVersion"]) > int(rv0)
      and new["metadata"]["generation"] == 2, new)
    st, _, body = c.req("PUT", _SLICE_PATH + "/upd", stale)
    t("update with a stale resourceVersion: 409", st == 409 and body["reason"] == "Conflict" and body["message"] ==
      'Operation cannot be fulfilled on resourceslices.resource.k8s.io "upd": the object has been modified; please '
      'apply your changes to the latest version and try again', body)
    st, _, same = c.req("PUT", _SLICE_PATH + "/upd", new)
    t("update that changes nothing keeps the resourceVersion", st == 200
      and same["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"], same)
    labelled = copy.deepcopy(new)
    labelled["metadata"]["labels"] = {"a": "b"}
    st, _, body = c.req("PUT", _SLICE_PATH + "/upd", labelled)
    t("metadata change keeps the generation", st == 200 and body["metadata"]["generation"] == 2
      and body["metadata"]["labels"] == {"a": "b"}, body)
    loose = copy.deepcopy(body)
    del loose["metadata"]["resourceVersion"]
    loose["spec"]["devices"][0]["attributes"]["numaNode"]["int"] = 2
    st, _, body = c.req("PUT", _SLICE_PATH + "/upd", loose)
    t("update without resourceVersion is unconditional", st == 200 and body["metadata"]["generation"] == 3, body)
    changed = copy.deepcopy(body)
    changed["spec"]["driver"] = "other.example.com"
    st, _, err = c.req("PUT", _SLICE_PATH + "/upd", changed)
    t("driver is immutable: 422", st == 422 and err["reason"] == "Invalid" and 'spec.driver: Invalid value: '
      '"other.example.com": field is immutable' in err["message"], err)
    changed = copy.deepcopy(body)
    changed["spec"]["nodeName"] = "node-z"
    st, _, err = c.req("PUT", _SLICE_PATH + "/upd", changed)
    t("nodeName is immutable: 422", st == 422 and "spec.nodeName: Invalid value: \"node-z\": field is immutable"
      in err["message"], err)
    st, _, err = c.req("PUT", _SLICE_PATH + "/other", body)
    t("update with a name that differs from the URL: 400", st == 400 and "does not match the name on the URL"
      in err["message"], err)
    ghost = copy.deepcopy(body)
    ghost["metadata"]["name"] = "ghost"
    st, _, err = c.req("PUT", _SLICE_PATH + "/ghost", ghost)
    t("update of a missing slice: 404", st == 404 and err["reason"] == "NotFound", err)
    st, _, err = c.req("PATCH", _SLICE_PATH + "/upd", {"metadata": {"labels": {"p": "q"}}},
                       ctype="application/merge-patch+json")
    t("merge patch", st == 200 and err["metadata"]["labels"] == {"a": "b", "p": "q"}, err)
    st, _, err = c.req("PATCH", _SLICE_PATH + "/upd", [{"op": "replace", "path": "/spec/pool/generation",
                                                         "value": 7}], ctype="application/json-patch+json")
    t("JSON patch", st == 200 and err["spec"]["pool"]["generation"] == 7, err)
    uid = err["metadata"]["uid"]
    st, _, err = c.req("DELETE", _SLICE_PATH + "/upd", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                        "preconditions": {"uid": "wrong"}})
    t("delete with a wrong uid precondition: 409", st == 409 and "Precondition failed: UID in precondition: wrong"
      in err["message"], err)
    st, _, err = c.req("DELETE", _SLICE_PATH + "/upd", {"preconditions": {"resourceVersion": "1"}})
    t("delete with a wrong resourceVersion precondition: 409", st == 409 and err["reason"] == "Conflict", err)
    st, _, err = c.req("DELETE", _SLICE_PATH + "/upd", {"preconditions": {"uid": uid}})
    t("delete returns the deleted object", st == 200 and err["kind"] == SLICE_KIND and err["metadata"]["uid"] == uid
      and api.get_slice("upd") is None, err)
    st, _, err = c.req("DELETE", _SLICE_PATH + "/upd")
    t("delete of a missing slice: 404", st == 404, err)
    for i in range(3):
        c.req("POST", _SLICE_PATH, _slice_body(name="gone-%d" % i, node="node-gone"))
    st, _, err = c.req("DELETE", _SLICE_PATH + "?fieldSelector=spec.nodeName%3Dnode-gone")
    t("delete a collection", st == 200 and [i["metadata"]["name"] for i in err["items"]] == ["gone-%d" % i
                                                                                             for i in range(3)]
      and not [s for s in api.slices() if s["spec"].get("nodeName") == "node-gone"], err)
    fin = _slice_body(name="held")
    fin["metadata"]["finalizers"] = ["example.com/hold"]
    c.req("POST", _SLICE_PATH, fin)
    st, _, err = c.req("DELETE", _SLICE_PATH + "/held")
    held = api.get_slice("held")
    t("delete with a finalizer: 202 and deletionTimestamp", st == 202 and held
      and held["metadata"].get("deletionTimestamp"), err)
    held["metadata"]["finalizers"] = []
    st, _, err = c.req("PUT", _SLICE_PATH + "/held", held)
    t("removing the last finalizer deletes", st == 200 and api.get_slice("held") is None, err)


def _test_quantities(t, api, c):
    cases = {"1024Mi": "1Gi", "2000": "2k", "1.5": "1500m", "0.5Gi": "512Mi", "1.5Gi": "1536Mi", "1e3": "1e3",
             "1500000": "1500k", "0.1m": "100u", "100m": "100m", "1Ki": "1Ki", "1023Ki": "1023Ki", "0": "0",
             "-1Gi": "-1Gi", "12e6": "12e6", "1.0000000001": "1000000001n", "0.5Ki": "512", "4": "4",
             "1000Mi": "1000Mi", "3G": "3G", "1.5Ki": "1536", "+5": "5", "0.0000000001": "1n", "1E3": "1e3",
             "2E": "2E", "1Ei": "1Ei"}
    bad = [(k, v, canonical_quantity(k)) for k, v in cases.items() if canonical_quantity(k) != v]
    t("quantity canonical forms", not bad, bad)
    errors = []
    for s in ("", "abc", "1.5.5", "1Xi", "1 Gi", "Gi", ".", "1e"):
        try:
            parse_quantity(s)
            errors.append(s)
        except ValueError:
            pass
    t("quantity parse errors", not errors, errors)
    order = [_qv(x) for x in ("500m", "1", "2M", "1Gi")]
    t("quantity comparison", order == sorted(order) and _qv("1Gi") == 1024**3 and _qv("2M") == 2 * 10**6)
    body = _slice_body(name="qty", devices=[_device(capacity={"memory": {"value": "1024Mi"},
                                                               "cpus": {"value": 4}})])
    st, _, obj = c.req("POST", _SLICE_PATH, body)
    caps = obj.get("spec", {}).get("devices", [{}])[0].get("capacity", {})
    t("stored quantities are canonical", st == 201 and caps == {"cpus": {"value": "4"}, "memory": {"value": "1Gi"}},
      obj)
    body = _slice_body(name="qty-bad", devices=[_device(capacity={"memory": {"value": "1.5.5"}})])
    st, _, obj = c.req("POST", _SLICE_PATH, body)
    t("unparsable quantity: 400", st == 400 and "quantities must match the regular expression" in obj["message"], obj)


def _test_decoding(t, api, c):
    body = _slice_body(name="unknown-field")
    body["spec"]["partitionTypeAttribute"] = "x.example.com/y"
    body["spec"]["devices"][0]["foo"] = 1
    st, hdrs, obj = c.req("POST", _SLICE_PATH, body)
    t("unknown fields are dropped with a warning", st == 201 and "partitionTypeAttribute" not in obj["spec"]
      and "foo" not in obj["spec"]["devices"][0] and 'unknown field \\"spec.partitionTypeAttribute\\"'
      in hdrs.get("warning", ""), (obj, hdrs.get("warning")))
    body["metadata"]["name"] = "unknown-strict"
    st, _, obj = c.req("POST", _SLICE_PATH + "?fieldValidation=Strict", body)
    t("unknown fields with fieldValidation=Strict: 400", st == 400 and 'strict decoding error: unknown field '
      '"spec.devices[0].foo"' in obj["message"], obj)
    body = _slice_body(name="wrong-type")
    body["spec"]["pool"]["generation"] = "1"
    st, _, obj = c.req("POST", _SLICE_PATH, body)
    t("wrong JSON type: 400", st == 400 and "cannot unmarshal string" in obj["message"], obj)
    st, _, obj = c.req("POST", _SLICE_PATH, b"{not json")
    t("malformed JSON: 400", st == 400, obj)
    body = _slice_body(name="empty-lists", devices=[_device(taints=[])])
    body["spec"]["pool"]["generation"] = 0
    st, _, obj = c.req("POST", _SLICE_PATH, body)
    t("empty lists are left out, zero pool fields kept", st == 201 and "taints" not in obj["spec"]["devices"][0]
      and obj["spec"]["pool"]["generation"] == 0, obj)
    st, _, obj = c.req("POST", _SLICE_PATH, _slice_body(name="taint-time", devices=[_device(taints=[
        {"key": "example.com/t", "effect": "NoSchedule"}])]))
    added = obj.get("spec", {}).get("devices", [{}])[0].get("taints", [{}])[0].get("timeAdded", "")
    t("taint timeAdded is defaulted", st == 201 and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", added), obj)
    st, _, obj = c.req("POST", _SLICE_PATH + "?dryRun=All", _slice_body(name="dry"))
    t("dryRun=All stores nothing", st == 201 and api.get_slice("dry") is None, obj)


def _many(n, **extra):
    return [_device("dev-%d" % i, **extra) for i in range(n)]


def _attrs(n, start=0):
    return {"a%d" % i: {"int": i} for i in range(start, start + n)}


def _validation_cases():
    """(label, slice body mutator, None when valid or the text the 422 message must hold)."""
    def spec(**kw):
        def f(s):
            s["spec"].update(kw)
        return f

    def dev(**kw):
        def f(s):
            s["spec"]["devices"][0].update(kw)
        return f

    def meta(**kw):
        def f(s):
            s["metadata"].update(kw)
        return f

    def cap_policy(policy, multi=True):
        return dev(capacity={"mem": {"value": "4Gi", "requestPolicy": policy}}, allowMultipleAllocations=multi)

    def pop(key):
        def f(s):
            s["spec"].pop(key)
        return f

    one_term = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}]}
    counters = lambda n: {"c%d" % i: {"value": "1"} for i in range(n)}  # noqa: E731
    sets = lambda n, c=1: [{"name": "set-%d" % i, "counters": counters(c)} for i in range(n)]  # noqa: E731
    taints = lambda n, effect="NoSchedule": [{"key": "example.com/t%d" % i, "effect": effect}  # noqa: E731
                                             for i in range(n)]
    return [
        ("name: DNS subdomain", meta(name="a.b-c"), None),
        ("name: not a DNS subdomain", meta(name="Bad_Name"), "metadata.name: Invalid value: \"Bad_Name\""),
        ("name: 253 characters", meta(name="a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61), None),
        ("name: 254 characters", meta(name="a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 62),
         "metadata.name: Invalid value"),
        ("driver: 63 characters", spec(driver="d" * 55 + ".example"), None),
        ("driver: 64 characters", spec(driver="d" * 56 + ".example"), "spec.driver: Too long: may not be more than "
                                                                      "63 bytes"),
        ("driver: not a DNS subdomain", spec(driver="bad_driver"), "spec.driver: Invalid value: \"bad_driver\""),
        ("pool: subdomains separated by /", spec(pool={"name": "a.b/c-d/e", "generation": 0,
                                                       "resourceSliceCount": 1}), None),
        ("pool: empty part", spec(pool={"name": "a//b", "generation": 0, "resourceSliceCount": 1}),
         "spec.pool.name: Invalid value: \"\""),
        ("pool: 254 characters", spec(pool={"name": ("a" * 50 + "/") * 4 + "a" * 50, "generation": 0,
                                            "resourceSliceCount": 1}), "spec.pool.name: Too long"),
        ("pool: negative generation", spec(pool={"name": "p", "generation": -1, "resourceSliceCount": 1}),
         "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero"),
        ("pool: resourceSliceCount 0", spec(pool={"name": "p", "generation": 0, "resourceSliceCount": 0}),
         "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero"),
        ("node selection: none", pop("nodeName"), "spec: Required value: exactly one of `nodeName`, `nodeSelector`, "
                                                  "`allNodes`, `perDeviceNodeSelection` is required"),
        ("node selection: two", spec(allNodes=True), "spec: Invalid value: \"{`nodeName`, `allNodes`}\""),
        ("node selection: allNodes", spec(nodeName=None, allNodes=True), None),
        ("node selection: allNodes false", spec(nodeName=None, allNodes=False),
         "spec.allNodes: Invalid value: false: must be either unset or set to true"),
        ("node selection: one selector term", spec(nodeName=None, nodeSelector=one_term), None),
        ("node selection: two selector terms", spec(nodeName=None, nodeSelector={
            "nodeSelectorTerms": one_term["nodeSelectorTerms"] * 2}),
         "spec.nodeSelector.nodeSelectorTerms: Invalid value"),
        ("node selection: per device", spec(nodeName=None, perDeviceNodeSelection=True,
                                            devices=[_device(nodeName="node-a")]), None),
        ("node selection: per device without one", spec(nodeName=None, perDeviceNodeSelection=True),
         "spec.devices[0]: Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes`"),
        ("node selection: device nodeName without perDeviceNodeSelection", dev(nodeName="node-a"),
         "can only be set if `perDeviceNodeSelection` is set to true"),
        ("devices: 128", spec(devices=_many(128)), None),
        ("devices: 129", spec(devices=_many(129)), "spec.devices: Too many: 129: must have at most 128 items"),
        ("devices: 64 with taints", spec(devices=_many(64, taints=taints(1))), None),
        ("devices: 65 with taints", spec(devices=_many(65, taints=taints(1))),
         "spec.devices: Too many: 65: must have at most 64 items"),
        ("devices: 65 consuming counters", spec(devices=_many(65, consumesCounters=[
            {"counterSet": "set-0", "counters": counters(1)}])), "spec.devices: Too many: 65: must have at most 64"),
        ("devices and sharedCounters", spec(sharedCounters=sets(1)),
         "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed"),
        ("sharedCounters: 8", spec(devices=None, sharedCounters=sets(8)), None),
        ("sharedCounters: 9", spec(devices=None, sharedCounters=sets(9)),
         "spec.sharedCounters: Too many: 9: must have at most 8 items"),
        ("sharedCounters: name not a DNS label", spec(devices=None, sharedCounters=[
            {"name": "Set_0", "counters": counters(1)}]), "spec.sharedCounters[0].name: Invalid value: \"Set_0\""),
        ("sharedCounters: 32 counters", spec(devices=None, sharedCounters=sets(1, 32)), None),
        ("sharedCounters: 33 counters", spec(devices=None, sharedCounters=sets(1, 33)),
         "spec.sharedCounters[0].counters: Too many: 33: must have at most 32 items"),
        ("device name: not a DNS label", dev(name="CPU_0"), "spec.devices[0].name: Invalid value: \"CPU_0\""),
        ("device name: duplicate", spec(devices=[_device("d"), _device("d")]),
         "spec.devices[1]: Duplicate value: \"d\""),
        ("attributes+capacity: 32", dev(attributes=_attrs(31)), None),
        ("attributes+capacity: 33", dev(attributes=_attrs(32)),
         "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must not exceed 32"),
        ("attribute: two values", dev(attributes={"a": {"int": 1, "bool": True}}),
         "spec.devices[0].attributes[a]: Invalid value"),
        ("attribute: no value", dev(attributes={"a": {}}),
         "spec.devices[0].attributes[a]: Invalid value: \"\": exactly one value must be specified"),
        ("attribute: string of 64", dev(attributes={"s": {"string": "x" * 64}}), None),
        ("attribute: string of 65", dev(attributes={"s": {"string": "x" * 65}}),
         "spec.devices[0].attributes[s].string: Too long: may not be more than 64 bytes"),
        ("attribute: version", dev(attributes={"v": {"version": "1.2.3-rc.1+b5"}}), None),
        ("attribute: bad version", dev(attributes={"v": {"version": "1.2"}}),
         "spec.devices[0].attributes[v].version: Invalid value: \"1.2\": must be a string compatible with semver"),
        ("attribute name: with a domain", dev(attributes={"example.com/ok_1": {"int": 1}}), None),
        ("attribute name: not a C identifier", dev(attributes={"9bad": {"int": 1}}),
         "spec.devices[0].attributes: Invalid value: \"9bad\": a valid C identifier"),
        ("attribute name: 33 characters", dev(attributes={"a" * 33: {"int": 1}}),
         "spec.devices[0].attributes: Too long: may not be more than 32 bytes"),
        ("attribute name: bad domain", dev(attributes={"Bad_Domain/x": {"int": 1}}),
         "spec.devices[0].attributes: Invalid value: \"Bad_Domain\": a lowercase RFC 1123 subdomain"),
        ("attribute name: two slashes", dev(attributes={"a/b/c": {"int": 1}}),
         "must not contain more than one slash"),
        ("capacity name: not a C identifier", dev(capacity={"bad-name": {"value": "1"}}),
         "spec.devices[0].capacity: Invalid value: \"bad-name\""),
        ("consumesCounters: 2", dev(consumesCounters=[{"counterSet": "s%d" % i, "counters": counters(1)}
                                                      for i in range(2)]), None),
        ("consumesCounters: 3", dev(consumesCounters=[{"counterSet": "s%d" % i, "counters": counters(1)}
                                                      for i in range(3)]),
         "spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items"),
        ("consumesCounters: counterSet not a DNS label", dev(consumesCounters=[{"counterSet": "S_1",
                                                                               "counters": counters(1)}]),
         "spec.devices[0].consumesCounters[0].counterSet: Invalid value: \"S_1\""),
        ("consumesCounters: 33 counters", dev(consumesCounters=[{"counterSet": "s", "counters": counters(33)}]),
         "spec.devices[0].consumesCounters[0].counters: Too many: 33: must have at most 32 items"),
        ("taints: 16", dev(taints=taints(16)), None),
        ("taints: 17", dev(taints=taints(17)), "spec.devices[0].taints: Too many: 17: must have at most 16 items"),
        ("taints: effect None", dev(taints=taints(1, "None")), None),
        ("taints: effect PreferNoSchedule", dev(taints=taints(1, "PreferNoSchedule")),
         "spec.devices[0].taints[0].effect: Unsupported value: \"PreferNoSchedule\": supported values: "
         "\"NoExecute\", \"NoSchedule\", \"None\""),
        ("bindingConditions: 4", dev(bindingConditions=["c%d" % i for i in range(4)],
                                     bindingFailureConditions=["f"]), None),
        ("bindingConditions: 5", dev(bindingConditions=["c%d" % i for i in range(5)],
                                     bindingFailureConditions=["f"]),
         "spec.devices[0].bindingConditions: Too many: 5: must have at most 4 items"),
        ("bindingFailureConditions: 5", dev(bindingConditions=["c"],
                                            bindingFailureConditions=["f%d" % i for i in range(5)]),
         "spec.devices[0].bindingFailureConditions: Too many: 5: must have at most 4 items"),
        ("requestPolicy with allowMultipleAllocations", cap_policy({"default": "1Gi", "validRange": {
            "min": "1Gi", "step": "1Gi"}}), None),
        ("requestPolicy without allowMultipleAllocations", cap_policy({"default": "1Gi"}, multi=False),
         "spec.devices[0].capacity[mem].requestPolicy: Forbidden: allowMultipleAllocations must be true"),
        ("validValues: 10 ascending", cap_policy({"default": "2", "validValues": ["500m", "2", "3"] + [
            "%dMi" % (i + 1) for i in range(7)]}), None),
        ("validValues: 500m and 1 are one integer value", cap_policy({"default": "1", "validValues": ["500m",
                                                                                                   "1"]}),
         "spec.devices[0].capacity[mem].requestPolicy.validValues[1]: Duplicate value: \"1\""),
        ("validValues: default not among them", cap_policy({"default": "3", "validValues": ["1", "2"]}),
         "spec.devices[0].capacity[mem].requestPolicy.validValues: Invalid value: \"3\": default value is not "
         "valid"),
        ("validValues: 11", cap_policy({"default": "1", "validValues": ["1"] + ["%dMi" % (i + 1)
                                                                                for i in range(10)]}),
         "spec.devices[0].capacity[mem].requestPolicy.validValues: Too many: 11: must have at most 10 items"),
        ("validValues: not ascending", cap_policy({"default": "1", "validValues": ["1Mi", "1"]}),
         "spec.devices[0].capacity[mem].requestPolicy.validValues[1]: Invalid value: \"1\": values must be sorted "
         "in ascending order"),
        ("validValues and validRange", cap_policy({"default": "1", "validValues": ["1"], "validRange": {
            "min": "1"}}), "spec.devices[0].capacity[mem].requestPolicy: Forbidden: exactly one policy"),
        ("validValues without default", cap_policy({"validValues": ["1"]}),
         "spec.devices[0].capacity[mem].requestPolicy.default: Required value: required when validValues is "
         "defined"),
        ("validRange without default", cap_policy({"validRange": {"min": "1"}}),
         "spec.devices[0].capacity[mem].requestPolicy.default: Required value: required when validRange is "
         "defined"),
        ("validRange: max over capacity", cap_policy({"default": "1Gi", "validRange": {"min": "1Gi",
                                                                                       "max": "8Gi"}}),
         "requestPolicy.validRange.max: Invalid value: \"8Gi\": max is larger than capacity value: 4Gi"),
        ("metadata: label value", meta(labels={"a": "not ok"}), "metadata.labels: Invalid value: \"not ok\""),
        ("metadata: owner without uid", meta(ownerReferences=[{"apiVersion": "v1", "kind": "Node", "name": "n"}]),
         "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty"),
    ]


def _test_validation(t, api, c):
    api.set_gates({"DRAListTypeAttributes": True})
    cases = _validation_cases() + [
        ("attribute values: 48", lambda s: s["spec"]["devices"][0].update(attributes={
            "l": {"ints": list(range(47))}, "x": {"int": 1}}), None),
        ("attribute values: 49", lambda s: s["spec"]["devices"][0].update(attributes={
            "l": {"ints": list(range(48))}, "x": {"int": 1}}),
         "spec.devices[0]: Invalid value: 49: the total number of attribute values must not exceed 48"),
        ("devices: 65 with list attributes", lambda s: s["spec"].update(devices=_many(
            65, attributes={"l": {"ints": [1, 2]}})), "spec.devices: Too many: 65: must have at most 64 items"),
        ("list attribute: empty", lambda s: s["spec"]["devices"][0].update(attributes={"l": {"strings": []}}),
         "spec.devices[0].attributes[l].strings: Invalid value: []: must not be empty if specified"),
    ]
    for i, (label, mutate, want) in enumerate(cases):
        body = _slice_body(name="v-%d" % i, driver="val.example.com")
        mutate(body)
        for k in [k for k, v in body["spec"].items() if v is None]:
            del body["spec"][k]
        name = body["metadata"]["name"]
        st, _, obj = c.req("POST", _SLICE_PATH, body)
        if want is None:
            t("valid: " + label, st == 201, obj.get("message") if isinstance(obj, dict) else obj)
            if st == 201:
                c.req("DELETE", _SLICE_PATH + "/" + name)
        else:
            msg = obj.get("message", "") if isinstance(obj, dict) else ""
            t("invalid: " + label, st == 422 and obj.get("reason") == "Invalid" and want in msg
              and msg.startswith('ResourceSlice.resource.k8s.io "%s" is invalid: ' % name), msg or obj)
    api.set_gates({"DRAListTypeAttributes": False})
    st, _, obj = c.req("POST", _SLICE_PATH, _slice_body(name="v-many", devices=[_device(name="Bad_1", taints=[
        {"key": "k", "effect": "Bad"}])]))
    causes = obj.get("details", {}).get("causes", [])
    t("several errors: one message in brackets, one cause each", st == 422 and obj["message"].count(", ") >= 1
      and ": [" in obj["message"] and len(causes) == 2 and {x["field"] for x in causes}
      == {"spec.devices[0].name", "spec.devices[0].taints[0].effect"}, obj)


def _test_gates(t, api, c):
    def create(name, **dev):
        return c.req("POST", _SLICE_PATH, _slice_body(name=name, driver="gate.example.com",
                                                      devices=[_device(**dev)]))

    def stored_device(obj):
        return obj["spec"]["devices"][0] if obj.get("spec", {}).get("devices") else {}

    t("default gates are 1.36's", api.gates == DEFAULT_GATES, api.gates)
    api.set_gates({"DRADeviceTaints": False})
    st, _, obj = create("g-taints", taints=[{"key": "k", "effect": "NoSchedule"}])
    t("DRADeviceTaints off drops taints", st == 201 and "taints" not in stored_device(obj), obj)
    st, _, obj = c.req("POST", _SLICE_PATH, _slice_body(name="g-taints-100", driver="gate.example.com",
                                                        devices=_many(100, taints=[{"key": "k",
                                                                                    "effect": "None"}])))
    t("dropped taints do not lower the device limit", st == 201, obj)
    api.set_gates({"DRADeviceTaints": True})
    st, _, obj = create("g-taints-kept", taints=[{"key": "k", "effect": "NoSchedule"}])
    api.set_gates({"DRADeviceTaints": False})
    obj["spec"]["devices"][0]["taints"].append({"key": "k2", "effect": "None"})
    st, _, obj = c.req("PUT", _SLICE_PATH + "/g-taints-kept", obj)
    t("a gated field already in use is kept on update", st == 200 and len(stored_device(obj).get("taints", [])) == 2,
      obj)
    api.set_gates({"DRADeviceTaints": True, "DRAPartitionableDevices": False})
    st, _, obj = create("g-part", consumesCounters=[{"counterSet": "s", "counters": {"c": {"value": "1"}}}])
    t("DRAPartitionableDevices off drops consumesCounters", st == 201 and "consumesCounters" not in stored_device(obj),
      obj)
    body = _slice_body(name="g-sets", driver="gate.example.com", devices=[],
                       sharedCounters=[{"name": "s", "counters": {"c": {"value": "1"}}}])
    st, _, obj = c.req("POST", _SLICE_PATH, body)
    t("DRAPartitionableDevices off drops sharedCounters (and devices: [] stays out)", st == 201
      and "sharedCounters" not in obj["spec"] and "devices" not in obj["spec"], obj)
    body = _slice_body(name="g-perdev", driver="gate.example.com", devices=[_device(nodeName="node-a")],
                       perDeviceNodeSelection=True)
    del body["spec"]["nodeName"]
    st, _, obj = c.req("POST", _SLICE_PATH, body)
    t("DRAPartitionableDevices off drops perDeviceNodeSelection (and the slice then fails validation)", st == 422
      and "spec: Required value" in obj.get("message", ""), obj)
    api.set_gates({"DRAPartitionableDevices": True, "DRADeviceBindingConditions": False})
    st, _, obj = create("g-bind", bindsToNode=True, bindingConditions=["c"], bindingFailureConditions=["f"])
    d = stored_device(obj)
    t("DRADeviceBindingConditions off drops binding fields", st == 201
      and not {"bindsToNode", "bindingConditions", "bindingFailureConditions"} & set(d), d)
    api.set_gates({"DRADeviceBindingConditions": True, "DRAResourceClaimDeviceStatus": False})
    st, _, obj = create("g-bind2", bindsToNode=False)
    t("DRAResourceClaimDeviceStatus off drops binding fields", st == 201 and "bindsToNode" not in stored_device(obj),
      obj)
    api.set_gates({"DRAResourceClaimDeviceStatus": True})
    st, _, obj = create("g-bind3", bindsToNode=False)
    t("bindsToNode false is kept when the gates are on", st == 201 and stored_device(obj).get("bindsToNode") is False,
      obj)
    api.set_gates({"DRAConsumableCapacity": False})
    st, _, obj = create("g-cons", allowMultipleAllocations=True,
                        capacity={"mem": {"value": "4Gi", "requestPolicy": {"default": "1Gi"}}})
    d = stored_device(obj)
    t("DRAConsumableCapacity off drops allowMultipleAllocations and requestPolicy", st == 201
      and "allowMultipleAllocations" not in d and d["capacity"] == {"mem": {"value": "4Gi"}}, d)
    api.set_gates({"DRAConsumableCapacity": True})
    st, _, obj = create("g-list", attributes={"l": {"ints": [1, 2]}, "x": {"int": 1}})
    t("DRAListTypeAttributes off (default): a list attribute is left empty and rejected", st == 422
      and "spec.devices[0].attributes[l]: Invalid value: \"\": exactly one value must be specified"
      in obj.get("message", ""), obj)
    api.set_gates({"DRAListTypeAttributes": True})
    st, _, obj = create("g-list", attributes={"l": {"ints": [1, 2]}})
    t("DRAListTypeAttributes on keeps list attributes", st == 201
      and stored_device(obj)["attributes"] == {"l": {"ints": [1, 2]}}, obj)
    api.set_gates({"DRAListTypeAttributes": False})
    st, _, obj = create("g-nar", nodeAllocatableResourceMappings={"cpu": {"capacityKey": "cpus"}})
    t("DRANodeAllocatableResources off (default) drops the mappings", st == 201
      and "nodeAllocatableResourceMappings" not in stored_device(obj), obj)
    api.set_gates({"DRANodeAllocatableResources": True})
    st, _, obj = create("g-nar2", nodeAllocatableResourceMappings={"cpu": {"capacityKey": "cpus"}})
    t("DRANodeAllocatableResources on keeps them, multiplier defaulted", st == 201
      and stored_device(obj).get("nodeAllocatableResourceMappings") == {"cpu": {"capacityKey": "cpus",
                                                                                "allocationMultiplier": "1"}}, obj)
    api.set_gates(DEFAULT_GATES)
    try:
        api.set_gates({"NoSuchGate": True})
        t("unknown gate is refused", False)
    except ValueError:
        t("unknown gate is refused", True)


def _test_watch(t, api, c):
    st, _, lst = c.req("GET", _SLICE_PATH + "?fieldSelector=spec.nodeName%3Dnode-w")
    rv = lst["metadata"]["resourceVersion"]
    w = _RawWatch(api, "watch=1&allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dnode-w&resourceVersion=" + rv)
    t("watch response headers", w.status == 200 and w.headers.get("transfer-encoding") == "chunked"
      and w.headers.get("content-type") == "application/json", w.headers)
    api.wait_for(lambda: len(api.open_watches()) >= 1)
    st, _, obj = c.req("POST", _SLICE_PATH, _slice_body(name="w1", node="node-w"))
    c.req("POST", _SLICE_PATH, _slice_body(name="w-other", node="node-x"))
    obj["spec"]["pool"]["generation"] = 2
    st, _, obj2 = c.req("PUT", _SLICE_PATH + "/w1", obj)
    c.req("DELETE", _SLICE_PATH + "/w1")
    events = [w.next() for _ in range(3)]
    types = [e.get("type") if isinstance(e, dict) else e for e in events]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events if isinstance(e, dict)]
    t("watch sees ADDED, MODIFIED, DELETED in order", types == ["ADDED", "MODIFIED", "DELETED"]
      and rvs == sorted(rvs) and len(set(rvs)) == 3 and events[1]["object"]["spec"]["pool"]["generation"] == 2,
      events)
    t("watch event objects carry apiVersion and kind", all(e["object"].get("kind") == SLICE_KIND
                                                           and e["object"].get("apiVersion") == API_VERSION
                                                           for e in events if isinstance(e, dict)))
    api.bookmark()
    e = w.next()
    t("bookmark", isinstance(e, dict) and e["type"] == "BOOKMARK" and e["object"] == {
        "kind": SLICE_KIND, "apiVersion": API_VERSION, "metadata": {"resourceVersion": api.resource_version}}, e)
    api.end_watches()
    t("end_watches ends the stream cleanly", w.next() == "END")
    w.send("watch=true&fieldSelector=spec.nodeName%3Dnode-w&resourceVersion=" + rv)
    e = w.next()
    t("a new watch on the same connection replays history", w.status == 200 and isinstance(e, dict)
      and e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "w1", e)
    w.next(), w.next()
    api.bookmark()
    api.end_watches()
    t("no bookmark without allowWatchBookmarks", w.next() == "END")
    w.send("watch=true&fieldSelector=spec.nodeName%3Dnode-w&resourceVersion=" + api.resource_version)
    api.expire_watches()
    e = w.next()
    t("expire_watches: an ERROR event 410 Expired, then a clean end", isinstance(e, dict) and e["type"] == "ERROR"
      and e["object"]["code"] == 410 and e["object"]["reason"] == "Expired" and w.next() == "END", e)
    w.send("watch=true&fieldSelector=spec.nodeName%3Dnode-w&resourceVersion=" + rv)
    e = w.next()
    t("expire_watches: resuming from before it is 410", isinstance(e, dict) and e["type"] == "ERROR"
      and e["object"]["code"] == 410 and w.next() == "END", e)
    w.close()
    ends = [x["how"] for x in api.watch_ends if x["query"].get("fieldSelector") == "spec.nodeName=node-w"]
    t("watch_ends: how each watch ended, in order", ends[-4:] == ["end", "end", "expired", "expired"], ends)

    c.req("POST", _SLICE_PATH, _slice_body(name="w2", node="node-w"))
    c.req("POST", _SLICE_PATH, _slice_body(name="w3", node="node-w"))
    w = _RawWatch(api, "watch=True&fieldSelector=spec.nodeName%3Dnode-w")
    got = sorted(w.next()["object"]["metadata"]["name"] for _ in range(2))
    t("a watch without resourceVersion starts with ADDED for what exists", got == ["w2", "w3"], got)
    w2 = _RawWatch(api, "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
                        "&fieldSelector=spec.nodeName%3Dnode-w")
    got = [w2.next() for _ in range(3)]
    t("sendInitialEvents ends the initial ADDED events with a marked bookmark", [e["type"] for e in got]
      == ["ADDED", "ADDED", "BOOKMARK"] and got[2]["object"]["metadata"].get("annotations")
      == {"k8s.io/initial-events-end": "true"}, got)
    w2.close()
    api.delete_slice("w2")
    e = w.next()
    t("external delete_slice emits DELETED", isinstance(e, dict) and e["type"] == "DELETED"
      and e["object"]["metadata"]["name"] == "w2", e)
    api.modify_slice("w3", lambda o: o["metadata"].setdefault("labels", {}).update(x="y"))
    e = w.next()
    t("external modify_slice emits MODIFIED", isinstance(e, dict) and e["type"] == "MODIFIED"
      and e["object"]["metadata"]["labels"] == {"x": "y"}, e)
    w.close()
    t("a closed client's watch goes away", api.wait_for(lambda: not api.open_watches(), timeout=3),
      api.open_watches())

    old = api.resource_version
    c.req("POST", _SLICE_PATH, _slice_body(name="w4", node="node-w"))
    latest = api.resource_version
    api.expire()
    w = _RawWatch(api, "watch=1&resourceVersion=" + old)
    e = w.next()
    t("resume from before expire(): ERROR 410 Expired, then the end", isinstance(e, dict) and e["type"] == "ERROR"
      and e["object"]["code"] == 410 and e["object"]["reason"] == "Expired" and e["object"]["kind"] == "Status"
      and w.next() == "END", e)
    w.send("watch=1&resourceVersion=" + latest)
    e = w.next()
    t("resume from the newest resourceVersion before expire(): 410 too", isinstance(e, dict)
      and e["type"] == "ERROR" and e["object"]["code"] == 410 and w.next() == "END", e)
    st, _, lst = c.req("GET", _SLICE_PATH)
    w.send("watch=1&resourceVersion=" + lst["metadata"]["resourceVersion"])
    c.req("POST", _SLICE_PATH, _slice_body(name="w5", node="node-w"))
    e = w.next()
    t("a watch from a list made after expire() works", isinstance(e, dict) and e["type"] == "ADDED"
      and e["object"]["metadata"]["name"] == "w5", e)
    w.close()
    started = time.monotonic()
    w = _RawWatch(api, "watch=1&timeoutSeconds=1&resourceVersion=" + api.resource_version)
    e = w.next(timeout=5)
    t("timeoutSeconds ends the stream", e == "END" and 0.8 < time.monotonic() - started < 3,
      (e, time.monotonic() - started))
    w.close()
    w = _RawWatch(api, "watch=1&resourceVersion=" + api.resource_version, token="")
    t("watch without a token: 401", w.status == 401)
    w.close()


CPU_DRIVER, MEM_DRIVER = "cpu.nrm.io", "memory.nrm.io"
_T0 = "2026-05-01T10:00:00Z"


def _claim_body(name, ns="ns1", node="node-a", devices=None, labels=None, selector=None):
    devices = devices or [(CPU_DRIVER, node, "cpu0")]
    results = [{"request": "req-%d" % i, "driver": d, "pool": p, "device": dev}
               for i, (d, p, dev) in enumerate(devices)]
    if selector is None:
        selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                            "values": [node]}]}]}
    meta = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta,
            "spec": {"devices": {"requests": [{"name": r["request"], "exactly": {"deviceClassName": r["driver"]}}
                                              for r in results]}},
            "status": {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}}


def _ready(driver, pool, device, status="True", **extra):
    d = {"driver": driver, "pool": pool, "device": device,
         "conditions": [{"type": "Ready", "status": status, "reason": "Prepared", "message": "",
                         "lastTransitionTime": _T0}]}
    d.update(extra)
    return d


def _apply(c, ns, name, devices, manager=CPU_DRIVER, token=None, force=True, body=None):
    q = "?fieldManager=" + manager if manager else "?"
    if force is not None:
        q += "&force=" + ("true" if force else "false")
    if body is None:
        body = {"apiVersion": API_VERSION, "kind": CLAIM_KIND, "metadata": {"name": name, "namespace": ns},
                "status": {"devices": devices}}
    return c.req("PATCH", "%s%s/resourceclaims/%s/status%s" % (_NS_PATH, ns, name, q), body, token=token,
                 ctype="application/apply-patch+yaml")


def _merge(c, ns, name, patch, token=None, sub=""):
    return c.req("PATCH", "%s%s/resourceclaims/%s%s" % (_NS_PATH, ns, name, sub), patch, token=token,
                 ctype="application/merge-patch+json")


def _names(body):
    return [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body.get("items", [])]


def _test_claims_list_watch(t, api, c):
    for cl in api.claims():  # what earlier sections left
        api.delete_claim(cl["metadata"]["namespace"], cl["metadata"]["name"])
    api.put_claim(_claim_body("a1", "lw1", "node-a", labels={"nrm.io/node": "node-a", "tier": "x"}))
    api.put_claim(_claim_body("a2", "lw2", "node-a", labels={"nrm.io/node": "node-a"}))
    api.put_claim(_claim_body("b1", "lw1", "node-b", labels={"nrm.io/node": "node-b"}))
    api.put_claim(_claim_body("u1", "lw1", "node-b"))
    st, _, body = c.req("GET", _CLAIM_PATH)
    t("claims: cluster-wide list", st == 200 and body["kind"] == "ResourceClaimList"
      and body["apiVersion"] == API_VERSION and _names(body) == [("lw1", "a1"), ("lw1", "b1"), ("lw1", "u1"),
                                                                 ("lw2", "a2")]
      and body["metadata"]["resourceVersion"] == api.resource_version
      and all("kind" not in i and "apiVersion" not in i for i in body["items"]), body)
    st, _, body = c.req("GET", _NS_PATH + "lw1/resourceclaims?labelSelector=nrm.io%2Fnode%3Dnode-a")
    st2, _, body2 = c.req("GET", _CLAIM_PATH + "?labelSelector=nrm.io%2Fnode%3Dnode-a")
    t("claims: list by label, namespaced and cluster-wide", st == 200 and _names(body) == [("lw1", "a1")]
      and _names(body2) == [("lw1", "a1"), ("lw2", "a2")], (body, body2))
    st, _, body = c.req("GET", _CLAIM_PATH + "?labelSelector=" + urllib.parse.quote("nrm.io/node=node-a,tier=x"))
    st2, _, body2 = c.req("GET", _CLAIM_PATH + "?labelSelector=" + urllib.parse.quote("nrm.io/node!=node-a"))
    t("claims: label selector with AND and !=", _names(body) == [("lw1", "a1")]
      and _names(body2) == [("lw1", "b1"), ("lw1", "u1")], (body, body2))
    st, _, body = c.req("GET", _CLAIM_PATH + "?fieldSelector=metadata.namespace%3Dlw2")
    st2, _, body2 = c.req("GET", _CLAIM_PATH + "?fieldSelector=spec.nodeName%3Dx")
    t("claims: field selector on metadata.namespace; others refused", _names(body) == [("lw2", "a2")]
      and st2 == 400 and body2["message"] == "field label not supported: spec.nodeName", (body, body2))
    st, _, p1 = c.req("GET", _CLAIM_PATH + "?limit=3")
    st2, _, p2 = c.req("GET", _CLAIM_PATH + "?limit=3&continue=" + p1["metadata"].get("continue", ""))
    t("claims: paging", _names(p1) == [("lw1", "a1"), ("lw1", "b1"), ("lw1", "u1")]
      and p1["metadata"].get("remainingItemCount") == 1 and _names(p2) == [("lw2", "a2")]
      and "continue" not in p2["metadata"], (p1, p2))
    st, _, got = c.req("GET", _NS_PATH + "lw1/resourceclaims/a1")
    t("claims: get", st == 200 and got["kind"] == CLAIM_KIND and got["metadata"]["labels"]["tier"] == "x", got)

    rv = api.resource_version
    sel = "labelSelector=nrm.io%2Fnode%3Dnode-b"
    w = _RawWatch(api, "watch=1&allowWatchBookmarks=true&resourceVersion=%s&%s" % (rv, sel),
                  path=_NS_PATH + "lw1/resourceclaims")
    wall = _RawWatch(api, "watch=1&resourceVersion=" + rv, path=_CLAIM_PATH)
    ws = _RawWatch(api, "watch=1&resourceVersion=" + rv)
    api.wait_for(lambda: len(api.open_watches()) >= 3)
    api.put_claim(_claim_body("n1", "lw1", "node-b"))  # no label: not for the filtered watch
    api.put_claim(_claim_body("n2", "lw2", "node-b", labels={"nrm.io/node": "node-b"}))  # another namespace
    st, _, patched = _merge(c, "lw1", "n1", {"metadata": {"labels": {"nrm.io/node": "node-b"}}})
    e = w.next()
    t("claims: a claim that gains the label arrives as ADDED in the filtered watch", isinstance(e, dict)
      and e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "n1"
      and e["object"]["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
      and e["object"]["kind"] == CLAIM_KIND and e["object"]["apiVersion"] == API_VERSION, e)
    api.update_claim_status("lw1", "n1", dict(api.get_claim("lw1", "n1")["status"], reservedFor=[
        {"resource": "pods", "name": "p", "uid": "u"}]))
    e = w.next()
    t("claims: a change of a matching claim is MODIFIED", isinstance(e, dict) and e["type"] == "MODIFIED"
      and e["object"]["status"]["reservedFor"][0]["name"] == "p", e)
    st, _, unl = _merge(c, "lw1", "n1", {"metadata": {"labels": {"nrm.io/node": None}}})
    e = w.next()
    t("claims: one that loses the label is DELETED, with its previous content at the new resourceVersion",
      isinstance(e, dict) and e["type"] == "DELETED" and e["object"]["metadata"]["name"] == "n1"
      and e["object"]["metadata"].get("labels") == {"nrm.io/node": "node-b"}
      and e["object"]["metadata"]["resourceVersion"] == unl["metadata"]["resourceVersion"], e)
    api.delete_claim("lw1", "b1")
    e = w.next()
    t("claims: delete_claim emits DELETED", isinstance(e, dict) and e["type"] == "DELETED"
      and e["object"]["metadata"]["name"] == "b1", e)
    api.bookmark()
    e = w.next()
    t("claims: a bookmark names ResourceClaim", isinstance(e, dict) and e["type"] == "BOOKMARK"
      and e["object"]["kind"] == CLAIM_KIND and e["object"]["apiVersion"] == API_VERSION, e)
    t("claims: nothing else reached the filtered watch", w.next(timeout=0.3) is None)
    got = []
    while True:
        e = wall.next(timeout=0.5)
        if not isinstance(e, dict):
            break
        got.append((e["type"], e["object"]["metadata"]["namespace"], e["object"]["metadata"]["name"]))
    t("claims: the cluster-wide watch sees every change in every namespace", got == [
        ("ADDED", "lw1", "n1"), ("ADDED", "lw2", "n2"), ("MODIFIED", "lw1", "n1"), ("MODIFIED", "lw1", "n1"),
        ("MODIFIED", "lw1", "n1"), ("DELETED", "lw1", "b1")], got)
    t("claims: a slice watch sees no claim events", ws.next(timeout=0.3) is None)
    for x in (w, wall, ws):
        x.close()
    w = _RawWatch(api, "watch=1&" + sel, path=_CLAIM_PATH)
    e = w.next()
    t("claims: a watch without resourceVersion starts with ADDED for the matching claims", isinstance(e, dict)
      and e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "n2" and w.next(timeout=0.3) is None, e)
    w.close()


def _test_claim_patch(t, api, c):
    api.put_claim(_claim_body("p1", "ns1", "node-a"))
    before = api.get_claim("ns1", "p1")
    st, _, body = _merge(c, "ns1", "p1", {"metadata": {"labels": {"nrm.io/node": "node-a"}}})
    t("claim patch: a merge patch adds a label and bumps the resourceVersion", st == 200
      and body["metadata"]["labels"] == {"nrm.io/node": "node-a"}
      and int(body["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
      and body["status"] == before["status"] and api.get_claim("ns1", "p1") == body
      and any(m["manager"] == "selftest" and m["operation"] == "Update" for m in body["metadata"]["managedFields"]),
      body)
    st, _, again = _merge(c, "ns1", "p1", {"metadata": {"labels": {"nrm.io/node": "node-a"}}})
    t("claim patch: a patch that changes nothing writes nothing", st == 200
      and again["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"], again)
    st, _, body2 = _merge(c, "ns1", "p1", {"metadata": {"labels": {"nrm.io/node": None, "a": "b"}},
                                          "status": {"allocation": None}})
    t("claim patch: null removes a label; the status is not changed through the claim", st == 200
      and body2["metadata"]["labels"] == {"a": "b"} and body2["status"] == before["status"], body2)
    st, _, err = _merge(c, "ns1", "p1", {"metadata": {"resourceVersion": before["metadata"]["resourceVersion"],
                                                      "labels": {"c": "d"}}})
    t("claim patch: a stale resourceVersion is a 409", st == 409 and err["message"] ==
      'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "p1": ' + OPTIMISTIC_LOCK, err)
    st, _, err = _merge(c, "ns1", "p1", {"metadata": {"labels": {"bad key": "x"}}})
    t("claim patch: an invalid label is a 422 naming metadata.labels", st == 422 and err["reason"] == "Invalid"
      and err["details"]["kind"] == CLAIM_KIND and err["details"]["causes"][0]["field"] == "metadata.labels"
      and err["message"].startswith('ResourceClaim.resource.k8s.io "p1" is invalid: metadata.labels: '), err)
    st, _, err = _merge(c, "ns1", "p1", {"spec": {"devices": {"requests": []}}})
    t("claim patch: the spec is immutable", st == 422 and err["details"]["causes"][0]["field"] == "spec"
      and err["message"].endswith("field is immutable"), err)
    st, _, err = c.req("PATCH", _NS_PATH + "ns1/resourceclaims/p1", {"metadata": {}}, ctype="text/plain")
    st2, _, err2 = _merge(c, "ns1", "nope", {"metadata": {"labels": {"a": "b"}}})
    t("claim patch: 415 for an unknown patch type, 404 for a missing claim", st == 415 and st2 == 404
      and err2["message"] == 'resourceclaims.resource.k8s.io "nope" not found', (err, err2))
    st, _, body = c.req("PATCH", _NS_PATH + "ns1/resourceclaims/p1",
                        [{"op": "add", "path": "/metadata/labels/e", "value": "f"}],
                        ctype="application/json-patch+json")
    t("claim patch: a JSON patch works too", st == 200 and body["metadata"]["labels"] == {"a": "b", "e": "f"}, body)


def _test_claim_apply(t, api, c):
    api.put_claim(_claim_body("s1", "ns1", "node-a", devices=[(CPU_DRIVER, "node-a", "cpu0"),
                                                              (CPU_DRIVER, "node-a", "cpu1"),
                                                              (MEM_DRIVER, "node-a", "mem0")]))
    rv0 = api.get_claim("ns1", "s1")["metadata"]["resourceVersion"]
    w = _RawWatch(api, "watch=1&resourceVersion=" + rv0, path=_NS_PATH + "ns1/resourceclaims")
    cond = dict(_ready(CPU_DRIVER, "node-a", "cpu0")["conditions"][0], lastTransitionTime="2026-05-01T12:00:00+02:00",
                observedGeneration=0)
    st, _, body = _apply(c, "ns1", "s1", [dict(_ready(CPU_DRIVER, "node-a", "cpu0"), conditions=[cond])])
    devs = body.get("status", {}).get("devices")
    t("apply: a node agent's entry is stored, its condition normalized", st == 200 and devs == [
        {"driver": CPU_DRIVER, "pool": "node-a", "device": "cpu0", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": _T0, "reason": "Prepared", "message": ""}]}]
      and int(body["metadata"]["resourceVersion"]) > int(rv0) and body["spec"] == api.get_claim("ns1", "s1")["spec"],
      body)
    e = w.next()
    t("apply: a MODIFIED event", isinstance(e, dict) and e["type"] == "MODIFIED"
      and e["object"]["status"]["devices"] == devs, e)
    mf = [m for m in body["metadata"].get("managedFields", []) if m["manager"] == CPU_DRIVER]
    t("apply: managedFields name the manager, Apply, the status subresource and the entry's key", len(mf) == 1
      and mf[0]["operation"] == "Apply" and mf[0]["subresource"] == "status"
      and 'k:{"device":"cpu0","driver":"cpu.nrm.io","pool":"node-a"}' in mf[0]["fieldsV1"]["f:status"]["f:devices"],
      mf)
    st, _, body = _apply(c, "ns1", "s1", [{"driver": MEM_DRIVER, "pool": "node-a", "device": "mem0",
                                           "data": {"bytes": 1}}], manager=MEM_DRIVER)
    t("apply: another manager's entry is added beside", st == 200
      and [(d["device"], d["conditions"]) for d in body["status"]["devices"]]
      == [("cpu0", devs[0]["conditions"]), ("mem0", None)], body)
    st, _, body = _apply(c, "ns1", "s1", [_ready(CPU_DRIVER, "node-a", "cpu1")])
    t("apply: an entry the manager leaves out is removed, the others' stay", st == 200
      and [d["device"] for d in body["status"]["devices"]] == ["mem0", "cpu1"], body)
    rv = body["metadata"]["resourceVersion"]
    st, _, same = _apply(c, "ns1", "s1", [_ready(CPU_DRIVER, "node-a", "cpu1")])
    t("apply: the same apply again writes nothing", st == 200 and same["metadata"]["resourceVersion"] == rv, same)
    st, _, body = _apply(c, "ns1", "s1", [])
    t("apply: applying no entries removes the manager's entries only", st == 200
      and [d["device"] for d in body["status"]["devices"]] == ["mem0"]
      and not any(m["manager"] == CPU_DRIVER for m in body["metadata"]["managedFields"]), body)
    st, _, err = _apply(c, "ns1", "s1", [{"driver": MEM_DRIVER, "pool": "node-a", "device": "mem0",
                                          "data": {"bytes": 2}}], manager="other", force=None)
    t("apply: a field another manager owns with another value is a conflict", st == 409 and err["reason"] == "Conflict"
      and err["message"] == 'Apply failed with 1 conflict: conflict with "memory.nrm.io" with subresource "status": '
      '.status.devices[device="mem0",driver="memory.nrm.io",pool="node-a"].data'
      and err["details"]["causes"][0]["reason"] == "FieldManagerConflict", err)
    st, _, body = _apply(c, "ns1", "s1", [{"driver": MEM_DRIVER, "pool": "node-a", "device": "mem0",
                                           "data": {"bytes": 2}}], manager="other", force=True)
    owners = _apply_owners(body)
    t("apply: force takes the field over", st == 200 and body["status"]["devices"][0]["data"] == {"bytes": 2}
      and "data" not in owners.get(MEM_DRIVER, {}).get((MEM_DRIVER, "node-a", "mem0", ""), ())
      and "data" in owners["other"][(MEM_DRIVER, "node-a", "mem0", "")], (body, owners))
    st, _, body = _apply(c, "ns1", "s1", [], manager=MEM_DRIVER)
    t("apply: an entry another manager still applies stays when one leaves it out", st == 200
      and body["status"]["devices"] == [{"driver": MEM_DRIVER, "pool": "node-a", "device": "mem0",
                                         "conditions": None, "data": {"bytes": 2}}], body)
    st, _, err = _apply(c, "ns1", "s1", [], manager="")
    t("apply: a fieldManager is required", st == 422 and err["message"]
      == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch', err)
    st, _, err = _merge(c, "ns1", "s1", {"metadata": {}}, sub="/status?force=true")
    t("apply: force on a non-apply patch is refused", st == 422 and err["message"]
      == 'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch', err)
    st, _, err = _apply(c, "ns1", "nope", [])
    t("apply: 404 for a missing claim", st == 404, err)
    st, _, err = _apply(c, "ns1", "s1", None, body={"apiVersion": API_VERSION, "kind": CLAIM_KIND,
                                                    "metadata": {"name": "other"}, "status": {}})
    t("apply: a body for another claim is a 400", st == 400 and "does not match the name on the URL" in err["message"],
      err)
    st, _, body = _merge(c, "ns1", "s1", {"status": {"devices": [_ready(CPU_DRIVER, "node-a", "cpu0")]}},
                         sub="/status")
    t("apply: a merge patch of the status replaces status.devices", st == 200
      and [d["device"] for d in body["status"]["devices"]] == ["cpu0"], body)
    cur = api.get_claim("ns1", "s1")
    cur["status"]["devices"] = []
    st, _, body = c.req("PUT", _NS_PATH + "ns1/resourceclaims/s1/status", cur)
    st2, _, err = c.req("PUT", _NS_PATH + "ns1/resourceclaims/s1/status", cur)
    t("apply: PUT of the status, with a 409 for a stale resourceVersion", st == 200 and "devices" not in body["status"]
      and st2 == 409, (body, err))
    api.update_claim_status("ns1", "s1", dict(cur["status"], devices=[_ready(CPU_DRIVER, "node-a", "cpu0")]))
    st, _, body = c.req("PUT", _NS_PATH + "ns1/resourceclaims/s1/status", dict(api.get_claim("ns1", "s1"), status={
        "allocation": {"devices": {"results": [{"request": "r", "driver": MEM_DRIVER, "pool": "node-a",
                                                "device": "mem0"}]}},
        "devices": [_ready(CPU_DRIVER, "node-a", "cpu0")]}))
    t("apply: entries of deallocated devices are dropped when the allocation changes", st == 200
      and "devices" not in body["status"] and body["status"]["allocation"]["devices"]["results"][0]["device"]
      == "mem0", body)
    w.close()


def _test_claim_validation(t, api, c):
    api.put_claim(_claim_body("v1", "ns1", "node-a"))

    def err_of(devices):
        st, _, err = _apply(c, "ns1", "v1", devices)
        return st, err.get("message", "") if isinstance(err, dict) else err, \
            [x.get("field") for x in (err.get("details") or {}).get("causes", [])] if isinstance(err, dict) else []

    prefix = 'ResourceClaim.resource.k8s.io "v1" is invalid: '
    nine = [dict(_ready(CPU_DRIVER, "node-a", "cpu0")["conditions"][0], type="T%d" % i) for i in range(9)]
    st, msg, fields = err_of([dict(_ready(CPU_DRIVER, "node-a", "cpu0"), conditions=nine)])
    t("validation: more than 8 conditions is a 422", st == 422 and msg == prefix +
      "status.devices[0].conditions: Too many: 9: must have at most 8 items"
      and fields == ["status.devices[0].conditions"], msg)
    st, _, _ = _apply(c, "ns1", "v1", [dict(_ready(CPU_DRIVER, "node-a", "cpu0"), conditions=nine[:8])])
    t("validation: 8 conditions are fine", st == 200, st)
    big = {"x": "a" * (MAX_DEVICE_DATA - len('{"x":""}') + 1)}
    st, msg, fields = err_of([dict(_ready(CPU_DRIVER, "node-a", "cpu0"), data=big)])
    t("validation: data over 10 KiB is a 422", st == 422 and msg == prefix +
      "status.devices[0].data: Too long: may not be more than 10240 bytes" and fields == ["status.devices[0].data"],
      msg)
    big["x"] = big["x"][1:]
    st, _, body = _apply(c, "ns1", "v1", [dict(_ready(CPU_DRIVER, "node-a", "cpu0"), data=big)])
    t("validation: data of exactly 10 KiB is fine", st == 200, body if st != 200 else "")
    st, msg, fields = err_of([_ready(CPU_DRIVER, "node-a", "cpu9")])
    t("validation: an entry for a device not allocated is a 422", st == 422 and msg == prefix +
      "status.devices[0]: Invalid value: cpu.nrm.io/node-a/cpu9: must be an allocated device in the claim"
      and fields == ["status.devices[0]"], msg)
    st, msg, fields = err_of([_ready(CPU_DRIVER, "node-b", "cpu0")])
    st2, msg2, _ = err_of([_ready(MEM_DRIVER, "node-a", "cpu0")])
    t("validation: the pool and the driver count too", st == 422 and "node-b/cpu0: must be an allocated device" in msg
      and st2 == 422 and "memory.nrm.io/node-a/cpu0: must be an allocated device" in msg2, (msg, msg2))
    st, msg, fields = err_of([{"driver": CPU_DRIVER, "pool": "node-a", "device": "cpu0",
                               "conditions": [{"type": "Ready", "status": "Maybe"}], "data": [1]}])
    t("validation: conditions and data are checked as metav1 and RawExtension are", st == 422 and fields == [
        "status.devices[0].conditions[0].status", "status.devices[0].conditions[0].lastTransitionTime",
        "status.devices[0].conditions[0].reason", "status.devices[0].data"]
      and 'status.devices[0].conditions[0].status: Unsupported value: "Maybe": supported values: "False", "True", '
          '"Unknown"' in msg and 'status.devices[0].data: Invalid value: "<value omitted>": must be a valid JSON object'
      in msg, msg)
    st, msg, _ = err_of([{"driver": CPU_DRIVER, "pool": "node-a", "device": "cpu0", "conditions": "Ready"}])
    t("validation: a value of the wrong type is a 400", st == 400 and msg.startswith(
        'ResourceClaim in version "v1" cannot be handled as a ResourceClaim: json: cannot unmarshal string'), msg)


_AGENT_RULES = [{"resource": "resourceclaims", "verbs": ["get", "list", "watch"]},
                {"resource": "resourceclaims/status", "verbs": ["get", "patch"]},
                {"resource": "resourceclaims/driver", "verbs": ["associated-node:patch"],
                 "resourceNames": [CPU_DRIVER]}]
_AGENT = "system:serviceaccount:nrm:nrm-agent"
_TOKENS = {
    "t0": None,
    "agent-a": {"user": _AGENT, "extra": {NODE_NAME_KEY: ["node-a"]}, "rules": _AGENT_RULES},
    "agent-b": {"user": _AGENT, "extra": {NODE_NAME_KEY: ["node-b"]}, "rules": _AGENT_RULES},
    "agent-none": {"user": _AGENT, "rules": _AGENT_RULES},
    "agent-two": {"user": _AGENT, "extra": {NODE_NAME_KEY: ["node-a", "node-b"]}, "rules": _AGENT_RULES},
    "agent-user": {"user": "system:node:node-a", "extra": {NODE_NAME_KEY: ["node-a"]}, "rules": _AGENT_RULES},
    "agent-mem": {"user": _AGENT, "extra": {NODE_NAME_KEY: ["node-a"]}, "rules": _AGENT_RULES[:2] + [
        {"resource": "resourceclaims/driver", "verbs": ["associated-node:patch"], "resourceNames": [MEM_DRIVER]}]},
    "agent-put": {"user": _AGENT, "extra": {NODE_NAME_KEY: ["node-a"]}, "rules": [
        {"resource": "resourceclaims/status", "verbs": ["update"]},
        {"resource": "resourceclaims/driver", "verbs": ["associated-node:update"], "resourceNames": [CPU_DRIVER]}]},
    "ctrl": {"user": "system:serviceaccount:nrm:nrm-controller", "rules": [
        {"resource": "resourceclaims", "verbs": ["get", "list", "watch", "patch"]},
        {"resource": "resourceclaims/status", "verbs": ["patch"]},
        {"resource": "resourceclaims/driver", "verbs": ["arbitrary-node:patch"], "resourceNames": [CPU_DRIVER]},
        {"resource": "leases", "verbs": ["get", "create", "update"], "namespace": "nrm"}]},
    "reader": {"user": "system:serviceaccount:nrm:reader", "rules": [
        {"resource": "resourceclaims", "verbs": ["get"]},
        {"resource": "resourceclaims", "verbs": ["list"], "namespace": "ns1"}]},
}


def _refusal(claim, user, verbs, ns="ns1", driver=CPU_DRIVER):
    return ('ResourceClaim.resource.k8s.io "%s" is invalid: status.devices: Forbidden: changing status.devices '
            'requires resource="resourceclaims/driver", verb="[%s]" permission: resourceclaims.resource.k8s.io '
            '"%s" is forbidden: User "%s" cannot %s resource "resourceclaims/driver" in API group '
            '"resource.k8s.io" in the namespace "%s"' % (claim, " ".join(verbs), driver, user, verbs[0], ns))


def _test_claim_authz(t, api, c):
    api.set_tokens(_TOKENS)
    try:
        _claim_authz(t, api, c)
    finally:
        api.set_tokens(["t0"])
        api.set_gates({"DRAResourceClaimGranularStatusAuthorization": True})


def _claim_authz(t, api, c):
    api.put_claim(_claim_body("z1", "ns1", "node-a"))
    entry = [_ready(CPU_DRIVER, "node-a", "cpu0")]
    assoc, arb = ["associated-node:patch", "arbitrary-node:patch"], ["arbitrary-node:patch"]
    st, _, body = _apply(c, "ns1", "z1", entry, token="agent-a")
    t("authz: the node agent of the claim's node may write its driver's entry", st == 200
      and body["status"]["devices"][0]["device"] == "cpu0", body)
    for tok, why in (("agent-none", "a token without the node-name extra"),
                     ("agent-b", "a token of another node"),
                     ("agent-two", "a token with two node names"),
                     ("agent-user", "a user who is no ServiceAccount")):
        user = _TOKENS[tok]["user"]
        st, _, err = _apply(c, "ns1", "z1", [_ready(CPU_DRIVER, "node-a", "cpu0", status="False")], token=tok)
        t("authz: refused for " + why, st == 422 and err["reason"] == "Invalid"
          and err["message"] == _refusal("z1", user, arb)
          and err["details"]["causes"] == [{"reason": "FieldValueForbidden", "field": "status.devices",
                                            "message": _refusal("z1", user, arb).split("status.devices: ", 1)[1]}],
          err)
    api.put_claim(_claim_body("z2", "ns1", "node-a", selector={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}]}))
    st, _, err = _apply(c, "ns1", "z2", entry, token="agent-a")
    t("authz: refused for a claim whose nodeSelector has two terms", st == 422
      and err["message"] == _refusal("z2", _AGENT, arb), err)
    api.put_claim(_claim_body("z3", "ns1", "node-a", selector={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}],
         "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]}))
    st, _, err = _apply(c, "ns1", "z3", entry, token="agent-a")
    t("authz: refused for a term with matchExpressions beside matchFields", st == 422
      and err["message"] == _refusal("z3", _AGENT, arb), err)
    st, _, err = _apply(c, "ns1", "z1", [_ready(CPU_DRIVER, "node-a", "cpu0", status="False")], token="agent-mem")
    t("authz: refused without the resourceclaims/driver rule for that driver", st == 422
      and err["message"] == _refusal("z1", _AGENT, assoc), err)
    api.put_claim(_claim_body("z4", "ns1", "node-a", devices=[(CPU_DRIVER, "node-a", "cpu0"),
                                                              (MEM_DRIVER, "node-a", "mem0")]))
    st, _, body = _apply(c, "ns1", "z4", entry, manager=CPU_DRIVER)
    st2, _, body2 = _apply(c, "ns1", "z4", [_ready(MEM_DRIVER, "node-a", "mem0")], manager=MEM_DRIVER,
                           token="agent-mem")
    t("authz: only the drivers whose entries change are checked", st == 200 and st2 == 200
      and len(body2["status"]["devices"]) == 2, body2)
    st, _, err = _apply(c, "ns1", "z4", [], manager=CPU_DRIVER, token="agent-mem")
    t("authz: removing an entry needs the permission for its driver", st == 422
      and err["message"] == _refusal("z4", _AGENT, assoc), err)
    api.put_claim(_claim_body("z5", "ns1", "node-b"))
    st, _, body = _apply(c, "ns1", "z5", entry[:0] + [_ready(CPU_DRIVER, "node-b", "cpu0")], token="ctrl")
    t("authz: a controller with arbitrary-node may write on any node", st == 200
      and body["status"]["devices"][0]["pool"] == "node-b", body)
    st, _, err = _apply(c, "ns1", "z5", [_ready(CPU_DRIVER, "node-b", "cpu0", status="False")], token="agent-a")
    t("authz: the agent of node-a may not write a node-b claim", st == 422
      and err["message"] == _refusal("z5", _AGENT, arb), err)
    st, _, err = _apply(c, "ns1", "z1", entry, token="reader")
    t("authz: without patch on resourceclaims/status: 403", st == 403 and err["reason"] == "Forbidden"
      and err["message"] == 'resourceclaims.resource.k8s.io "z1" is forbidden: User "system:serviceaccount:nrm:reader" '
      'cannot patch resource "resourceclaims/status" in API group "resource.k8s.io" in the namespace "ns1"'
      and err["details"] == {"name": "z1", "group": GROUP, "kind": "resourceclaims"}, err)
    cur = api.get_claim("ns1", "z1")
    cur["status"]["devices"] = [_ready(CPU_DRIVER, "node-a", "cpu0", status="Unknown")]
    st, _, body = c.req("PUT", _NS_PATH + "ns1/resourceclaims/z1/status", cur, token="agent-put")
    st2, _, err2 = _apply(c, "ns1", "z1", entry, token="agent-put")
    t("authz: PUT needs associated-node:update, and a token for update may not patch", st == 200
      and body["status"]["devices"][0]["conditions"][0]["status"] == "Unknown" and st2 == 403
      and "cannot patch resource" in err2["message"], (body, err2))
    cur = api.get_claim("ns1", "z1")
    cur["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u"}]
    st, _, err = c.req("PUT", _NS_PATH + "ns1/resourceclaims/z1/status", cur, token="agent-put")
    t("authz: changing reservedFor needs resourceclaims/binding", st == 422 and err["message"] ==
      'ResourceClaim.resource.k8s.io "z1" is invalid: status: Forbidden: changing status.allocation or '
      'status.reservedFor requires resource="resourceclaims/binding", verb="update" permission: '
      'resourceclaims.resource.k8s.io is forbidden: User "%s" cannot update resource "resourceclaims/binding" in '
      'API group "resource.k8s.io" at the cluster scope' % _AGENT, err)
    st, _, err = c.req("GET", _CLAIM_PATH, token="reader")
    st2, _, body = c.req("GET", _NS_PATH + "ns1/resourceclaims", token="reader")
    st3, _, err3 = c.req("GET", _NS_PATH + "ns2/resourceclaims", token="reader")
    t("authz: list needs its rule, cluster-wide or in the namespace", st == 403 and err["message"] ==
      'resourceclaims.resource.k8s.io is forbidden: User "system:serviceaccount:nrm:reader" cannot list resource '
      '"resourceclaims" in API group "resource.k8s.io" at the cluster scope' and st2 == 200 and st3 == 403
      and err3["message"].endswith('in the namespace "ns2"'), (err, err3))
    w = _RawWatch(api, "watch=1", token="reader", path=_NS_PATH + "ns1/resourceclaims")
    st, _, _ = c.req("GET", _NS_PATH + "ns1/resourceclaims/z1", token="reader")
    t("authz: watch is its own verb; get is allowed", w.status == 403 and st == 200, w.status)
    w.close()
    st, _, err = c.req("GET", _SLICE_PATH, token="agent-a")
    st2, _, body = c.req("GET", "/version", token="agent-a")
    t("authz: other resources need rules too; /version does not", st == 403 and err["message"] ==
      'resourceslices.resource.k8s.io is forbidden: User "%s" cannot list resource "resourceslices" in API group '
      '"resource.k8s.io" at the cluster scope' % _AGENT and st2 == 200, err)
    st, _, err = _merge(c, "ns1", "z1", {"metadata": {"labels": {"a": "b"}}}, token="agent-a")
    st2, _, body = _merge(c, "ns1", "z1", {"metadata": {"labels": {"a": "b"}}}, token="ctrl")
    t("authz: labelling a claim needs patch on resourceclaims", st == 403 and st2 == 200, (err, body))
    api.set_gates({"DRAResourceClaimGranularStatusAuthorization": False})
    st, _, body = _apply(c, "ns1", "z1", [_ready(CPU_DRIVER, "node-a", "cpu0", status="False")], token="agent-none")
    t("authz: with DRAResourceClaimGranularStatusAuthorization off, resourceclaims/status is enough", st == 200, body)


def _test_leases(t, api, c):
    lp = _LEASE_PATH + "nrm/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": LEASE_KIND, "metadata": {"name": "nrm-controller"},
             "spec": {"holderIdentity": "pod-1", "leaseDurationSeconds": 15, "acquireTime": "2026-05-01T10:00:00Z",
                      "renewTime": "2026-05-01T10:00:00.5Z", "leaseTransitions": 0}}
    st, _, body = c.req("POST", lp, lease)
    t("leases: create", st == 201 and body["kind"] == LEASE_KIND and body["metadata"]["namespace"] == "nrm"
      and body["metadata"]["uid"] and body["metadata"]["resourceVersion"].isdigit()
      and body["spec"]["renewTime"] == "2026-05-01T10:00:00.500000Z"
      and body["spec"]["acquireTime"] == "2026-05-01T10:00:00.000000Z" and body["spec"]["leaseTransitions"] == 0
      and api.get_lease("nrm", "nrm-controller") == body, body)
    st, _, err = c.req("POST", lp, lease)
    t("leases: create twice: 409 AlreadyExists", st == 409 and err["reason"] == "AlreadyExists"
      and err["message"] == 'leases.coordination.k8s.io "nrm-controller" already exists'
      and err["details"] == {"name": "nrm-controller", "group": COORDINATION, "kind": "leases"}, err)
    st, _, got = c.req("GET", lp + "/nrm-controller")
    t("leases: get", st == 200 and got == body, got)
    renew = copy.deepcopy(got)
    renew["spec"]["renewTime"] = "2026-05-01T10:00:05Z"
    st, _, body2 = c.req("PUT", lp + "/nrm-controller", renew)
    t("leases: update with the current resourceVersion", st == 200
      and int(body2["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])
      and body2["spec"]["renewTime"] == "2026-05-01T10:00:05.000000Z", body2)
    st, _, err = c.req("PUT", lp + "/nrm-controller", renew)
    t("leases: update with a stale resourceVersion: 409 Conflict", st == 409 and err["reason"] == "Conflict"
      and err["message"] == 'Operation cannot be fulfilled on leases.coordination.k8s.io "nrm-controller": '
      + OPTIMISTIC_LOCK, err)
    del renew["metadata"]["resourceVersion"]
    st, _, err = c.req("PUT", lp + "/nrm-controller", renew)
    t("leases: update without a resourceVersion: 422", st == 422 and err["message"] ==
      'leases.coordination.k8s.io "nrm-controller" is invalid: metadata.resourceVersion: Invalid value: 0: '
      'must be specified for an update', err)
    st, _, body = c.req("PUT", lp + "/other", dict(lease, metadata={"name": "other"}))
    st2, _, err2 = c.req("GET", lp + "/nope")
    t("leases: a PUT creates a missing Lease; 404 for a missing one", st == 201 and st2 == 404
      and err2["message"] == 'leases.coordination.k8s.io "nope" not found', (body, err2))
    st, _, err = c.req("POST", lp, dict(lease, metadata={"name": "bad"}, spec={"leaseDurationSeconds": 0}))
    t("leases: validation", st == 422 and err["message"] ==
      'Lease.coordination.k8s.io "bad" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0',
      err)
    st, _, err = c.req("POST", lp, dict(lease, metadata={"name": "x", "namespace": "default"}))
    t("leases: a body in another namespace is a 400", st == 400, err)
    st, _, body = c.req("DELETE", lp + "/other")
    t("leases: delete", st == 200 and body["status"] == "Success" and api.get_lease("nrm", "other") is None, body)
    held = api.put_lease({"metadata": {"name": "held", "namespace": "nrm"}, "spec": {"holderIdentity": "pod-0"}})
    st, _, body = c.req("GET", lp + "/held")
    t("leases: put_lease, as another holder would", st == 200 and body == held
      and [x["metadata"]["name"] for x in api.leases("nrm")] == ["held", "nrm-controller"], body)
    api.set_tokens(_TOKENS)
    try:
        st, _, body = c.req("GET", lp + "/nrm-controller", token="ctrl")
        st2, _, err2 = c.req("GET", lp + "/nrm-controller", token="reader")
        st3, _, err3 = c.req("POST", _LEASE_PATH + "default/leases", lease, token="ctrl")
        t("leases: RBAC", st == 200 and st2 == 403 and err2["message"] ==
          'leases.coordination.k8s.io "nrm-controller" is forbidden: User "system:serviceaccount:nrm:reader" '
          'cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "nrm"'
          and st3 == 403 and err3["message"] == 'leases.coordination.k8s.io is forbidden: User '
          '"system:serviceaccount:nrm:nrm-controller" cannot create resource "leases" in API group '
          '"coordination.k8s.io" in the namespace "default"', (err2, err3))
    finally:
        api.set_tokens(["t0"])


def _test_faults(t, api, c):
    api.fail_next(1, 500)
    st, _, body = c.req("GET", "/api/v1/nodes/node-a")
    st2, _, _ = c.req("GET", "/api/v1/nodes/node-a")
    t("fail_next 500 then success", st == 500 and body["reason"] == "InternalError" and body["code"] == 500
      and st2 == 200, body)
    api.fail_next(1, 503, method="POST")
    st, _, _ = c.req("GET", "/api/v1/nodes/node-a")
    st2, _, body = c.req("POST", _SLICE_PATH, _slice_body(name="f1"))
    st3, _, _ = c.req("POST", _SLICE_PATH, _slice_body(name="f1"))
    t("fail_next filtered by method", st == 200 and st2 == 503 and body["reason"] == "ServiceUnavailable"
      and st3 == 201 and api.get_slice("f1") is not None, (st, st2, st3))
    api.fail_next(2, 429, path_contains="fieldSelector=spec.nodeName")
    st, hdrs, body = c.req("GET", _SLICE_PATH + "?fieldSelector=spec.nodeName%3Dnode-a")
    st2, _, _ = c.req("GET", _SLICE_PATH)
    st3, _, _ = c.req("GET", _SLICE_PATH + "?fieldSelector=spec.nodeName%3Dnode-a")
    st4, _, _ = c.req("GET", _SLICE_PATH + "?fieldSelector=spec.nodeName%3Dnode-a")
    t("fail_next filtered by path, 429 with Retry-After", st == 429 and hdrs.get("retry-after") == "1"
      and body["reason"] == "TooManyRequests" and st2 == 200 and st3 == 429 and st4 == 200, (st, st2, st3, st4))
    api.delay_next(1, 1.5, path_contains="/api/v1/nodes")
    started = time.monotonic()
    try:
        c.req("GET", "/api/v1/nodes/node-a", timeout=0.5)
        timed_out = False
    except (socket.timeout, TimeoutError):
        timed_out = True
    c.close()
    st, _, _ = c.req("GET", "/api/v1/nodes/node-a")
    t("delay_next makes a client time out, then requests are fast again", timed_out and st == 200
      and time.monotonic() - started < 1.4, time.monotonic() - started)
    api.delay_next(1, 0.6, method="PUT")
    cur = api.get_slice("f1")
    started = time.monotonic()
    st, _, _ = c.req("PUT", _SLICE_PATH + "/f1", cur)
    t("delay_next: a slow request still completes", st == 200 and time.monotonic() - started >= 0.55)
    api.set_tokens(["t1"])
    st, _, _ = c.req("GET", "/api/v1/nodes/node-a", token="t0")
    st2, _, _ = c.req("GET", "/api/v1/nodes/node-a", token="t1")
    api.set_tokens(["t0", "t1"])
    st3, _, _ = c.req("GET", "/api/v1/nodes/node-a", token="t0")
    t("token rotation", st == 401 and st2 == 200 and st3 == 200, (st, st2, st3))


def _test_restart(t, api, c):
    port = api.port
    before = api.slices()
    w = _RawWatch(api, "watch=1&resourceVersion=" + api.resource_version)
    api.wait_for(lambda: len(api.open_watches()) >= 1)
    c.req("GET", "/api/v1/nodes/node-a")
    idle = c.conn.sock
    started = time.monotonic()
    api.restart()
    e = w.next(timeout=5)
    t("restart closes open watches without a clean end", e == "EOF", e)
    t("restart does not hang", time.monotonic() - started < 5, time.monotonic() - started)
    w.close()
    st, _, _ = c.req("GET", "/api/v1/nodes/node-a")
    t("restart keeps the port and closes idle connections", api.port == port and st == 200 and c.conn.sock
      is not idle)
    st, _, body = c.req("GET", _SLICE_PATH)
    t("restart keeps the store", st == 200 and sorted(i["metadata"]["name"] for i in body["items"])
      == [s["metadata"]["name"] for s in before] and api.slices() == before)


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def _test_kubeconfig(t, api, c):
    path = os.path.join(api.workdir, "kubeconfig")
    api.write_kubeconfig(path)
    text = _read(path)
    t("kubeconfig with a token and a CA path", 'server: "%s"' % api.url in text and 'token: "t0"' in text
      and 'certificate-authority: "%s"' % api.ca_path in text and "current-context: fakeapi" in text, text)
    api.write_kubeconfig(path, token="t1", ca_data=True)
    text = _read(path)
    m = re.search(r'certificate-authority-data: "([^"]+)"', text)
    t("kubeconfig with certificate-authority-data", m and base64.b64decode(m.group(1)) == _read(api.ca_path, "rb")
      and 'token: "t1"' in text, text)
    tf = os.path.join(api.workdir, "token")
    api.write_kubeconfig(path, token_file=tf)
    text = _read(path)
    t("kubeconfig with tokenFile", 'tokenFile: "%s"' % tf in text and "token:" not in text
      and _read(tf).strip() == "t0", text)


def _test_log(t, api, c):
    log = api.requests
    t("request log", log and all(set(r) == {"method", "path", "query", "status", "user_agent", "t", "user"}
                                 for r in log)
      and any(r["user_agent"] == "selftest/1.0" for r in log) and any(r["status"] == 401 for r in log))
    t("request log names the user and the time of arrival", any(r["user"] == "system:admin" for r in log)
      and all(r["user"] == "" for r in log if r["status"] == 401)
      and all(isinstance(r["t"], float) and r["t"] <= time.monotonic() for r in log))
    t("request log never holds a token", "Bearer" not in repr(log) and "'t0'" not in repr(log)
      and "'t1'" not in repr(log))
    t("writes() holds only writes", api.writes() and all(r["method"] in ("POST", "PUT", "PATCH", "DELETE")
                                                         for r in api.writes()))
    t("no internal errors", not api.internal_errors, api.internal_errors)


def selftest():
    t = _Checks()
    with tempfile.TemporaryDirectory(prefix="fakeapi-") as d:
        api = FakeAPI(d, tokens=["t0"])
        api.start()
        c = _Client(api)
        try:
            for name, fn in (("basics", _test_basics), ("create and list", _test_create_list),
                             ("paging", _test_paging), ("update and delete", _test_update_delete),
                             ("quantities", _test_quantities), ("decoding", _test_decoding),
                             ("validation", _test_validation), ("gates", _test_gates), ("watch", _test_watch),
                             ("claims list and watch", _test_claims_list_watch), ("claim patch", _test_claim_patch),
                             ("claim apply", _test_claim_apply), ("claim validation", _test_claim_validation),
                             ("claim authorization", _test_claim_authz), ("leases", _test_leases),
                             ("faults", _test_faults), ("restart", _test_restart),
                             ("kubeconfig", _test_kubeconfig), ("request log", _test_log)):
                t.section(name, fn, api, c)
        finally:
            c.close()
            started = time.monotonic()
            api.stop()
            t("stop does not hang", time.monotonic() - started < 5)
    print("%d passed, %d failed" % (t.passed, t.failed))
    return 0 if t.failed == 0 else 1


def serve(directory, port, tokens, nodes):
    api = FakeAPI(directory, tokens=tokens)
    for n in nodes:
        api.add_node(n)
    api.start(port=port)
    kubeconfig = api.write_kubeconfig(os.path.join(directory, "kubeconfig"))
    print(api.url, flush=True)
    print("kubeconfig: " + kubeconfig, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    api.stop()
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description="A loopback fake Kubernetes API server for nrm's tests.")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--selftest", action="store_true", help="check the server against itself")
    g.add_argument("--serve", metavar="DIR", help="serve in the foreground; certificates and kubeconfig go to DIR")
    p.add_argument("--port", type=int, default=0, help="with --serve: the port (default: a free one)")
    p.add_argument("--token", action="append", help="with --serve: an accepted token (default: t0)")
    p.add_argument("--tokens", metavar="FILE", help="with --serve: a JSON table token -> identity with RBAC rules "
                                                    "(see FakeAPI.__init__), instead of --token")
    p.add_argument("--node", action="append", default=[], help="with --serve: a Node to create")
    args = p.parse_args(argv)
    if args.selftest:
        return selftest()
    tokens = args.token or ["t0"]
    if args.tokens:
        with open(args.tokens) as f:
            tokens = json.load(f)
    return serve(args.serve, args.port, tokens, args.node)


if __name__ == "__main__":
    sys.exit(main())

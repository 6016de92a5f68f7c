#!/usr/bin/env python3
"""Renders a Helm chart the way `helm template` does, for the subset of
Helm's template language that deploy/helm/nrm uses, so that the chart can be
tested and the plain manifest generated where no helm binary exists.

  render.py CHART [-n NAMESPACE] [-f VALUES.yaml]... [--set KEY=VALUE]...

The subset:
  - actions {{ PIPELINE }}, with the trim markers {{- and -}};
  - {{ if PIPELINE }} ... [{{ else }} ...] {{ end }};
  - operands .Values.a.b, .Release.Namespace, .Release.Name, .Chart.Name,
    .Chart.Version, .Chart.AppVersion, "strings", integers, (PIPELINE);
  - pipelines "a | f x" (the value of a is f's last argument);
  - functions toYaml, toPrettyJson, indent, nindent, quote, join, has, or,
    not.
Anything else is an error naming the file and the construct: a template
that renders here renders the same with helm, or not at all here.
Values are chart/values.yaml, then each -f file (maps merged, anything else
replaced, null removes a key), then each --set (a.b=v, a\\.b=v for a dot in
a key, x={a,b} for a list of strings, true/false/null and integers typed as
helm types them). Documents come out ordered by kind as helm installs them
(Namespace first); empty ones are dropped.
"""

import json
import math
import os
import re
import sys
from decimal import Decimal

import yaml


class RenderError(Exception):
    pass


# --- values -----------------------------------------------------------------


def merge(base, over):
    """Helm's coalescing of user values over chart values."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return over
    out = dict(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif k in out:
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def typed(s):
    """strvals' typing of a --set value."""
    if s == "true":
        return True
    if s == "false":
        return False
    if s == "null":
        return None
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", s):
        return int(s)
    return s


def split_unescaped(s, sep):
    parts, cur, depth, i = [], "", 0, 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur += s[i:i + 2]
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    parts.append(cur)
    return parts


def set_value(values, assignment):
    if "=" not in assignment:
        raise RenderError(f"--set `{assignment}`: expected KEY=VALUE")
    for a in split_unescaped(assignment, ","):
        key, _, raw = a.partition("=")
        path = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key)]
        if not key or any(p == "" for p in path):
            raise RenderError(f"--set `{a}`: bad key `{key}`")
        if raw.startswith("{") and raw.endswith("}"):
            val = [typed(x) for x in split_unescaped(raw[1:-1], ",") if x != ""]
        else:
            val = typed(raw.replace("\\,", ","))
        node = values
        for p in path[:-1]:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        if val is None:
            node.pop(path[-1], None)
        else:
            node[path[-1]] = val


# --- Go's formatting ----------------------------------------------------------


def go_float(f):
    """strconv.FormatFloat(f, 'g', -1, 64), what %v prints for a float64:
    the shortest digits, with an exponent below 1e-4 and from 1e6 on."""
    if math.isinf(f) or math.isnan(f):
        return "NaN" if math.isnan(f) else ("+Inf" if f > 0 else "-Inf")
    if f == 0:
        return "0"
    t = Decimal(repr(float(f))).as_tuple()
    digits = "".join(map(str, t.digits)).rstrip("0")
    exp = len("".join(map(str, t.digits))) + t.exponent - 1
    sign = "-" if t.sign else ""
    if exp < -4 or exp >= 6:
        m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{m}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    if len(digits) <= exp + 1:
        return sign + digits + "0" * (exp + 1 - len(digits))
    return f"{sign}{digits[:exp + 1]}.{digits[exp + 1:]}"


def go_str(v):
    """fmt's %v of a value as helm holds it (numbers are float64)."""
    if v is None:
        return ""  # helm prints <no value>, then replaces it by ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return go_float(float(v))
    if isinstance(v, str):
        return v
    raise RenderError(f"cannot print a {type(v).__name__} ({v!r}): use toYaml")


def go_quote(s):
    """fmt's %q."""
    out = ['"']
    for c in s:
        o = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(c)])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif not c.isprintable():
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def to_yaml(v):
    """helm's toYaml: sigs.k8s.io/yaml (sorted keys, sequences not indented
    under their key), without the final newline."""
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True, allow_unicode=True,
                          width=1 << 30).rstrip("\n") if v is not None else "null"


def to_pretty_json(v):
    """sprig's toPrettyJson: json.MarshalIndent(v, "", "  "), which sorts
    keys and escapes <, > and & as Go does."""
    s = json.dumps(v, indent=2, sort_keys=True, ensure_ascii=False)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def truth(v):
    """text/template's truth: false, 0, nil and empty strings, lists and
    maps are false."""
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, (int, float)):
        return v != 0
    if isinstance(v, (str, list, dict)):
        return len(v) > 0
    return True


def fn_indent(n, s):
    pad = " " * int(n)
    return pad + go_str(s).replace("\n", "\n" + pad)


def fn_has(needle, haystack):
    if haystack is None:
        return False
    if not isinstance(haystack, list):
        raise RenderError(f"has: {haystack!r} is not a list")
    return needle in haystack


def fn_join(sep, lst):
    if not isinstance(lst, list):
        raise RenderError(f"join: {lst!r} is not a list")
    return go_str(sep).join(go_str(x) for x in lst if x is not None)


def fn_quote(*args):
    return " ".join(go_quote(go_str(a)) for a in args if a is not None)


def fn_or(*args):
    for a in args:
        if truth(a):
            return a
    return args[-1]


FUNCS = {
    "toYaml": (1, to_yaml),
    "toPrettyJson": (1, to_pretty_json),
    "indent": (2, fn_indent),
    "nindent": (2, lambda n, s: "\n" + fn_indent(n, s)),
    "quote": (None, fn_quote),
    "join": (2, fn_join),
    "has": (2, fn_has),
    "or": (None, fn_or),
    "not": (1, lambda v: not truth(v)),
}

# --- template language ----------------------------------------------------------

TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(-?[0-9]+)\b|(\.[A-Za-z0-9_.]*)|([A-Za-z_][A-Za-z0-9_]*)|(\|)|(\()|(\)))')


def tokenize(src, where):
    toks, pos = [], 0
    src = src.rstrip()
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m or m.end() == pos:
            raise RenderError(f"{where}: cannot parse `{src[pos:].strip()}` in `{src.strip()}`")
        pos = m.end()
        kinds = ("str", "int", "field", "ident", "pipe", "lparen", "rparen")
        for k, g in zip(kinds, m.groups()):
            if g is not None:
                toks.append((k, g))
    return toks


class Expr:
    def __init__(self, src, where):
        self.where = where
        self.toks = tokenize(src, where)
        self.i = 0
        self.tree = self.pipeline()
        if self.i != len(self.toks):
            raise RenderError(f"{where}: unexpected `{self.toks[self.i][1]}` in `{src.strip()}`")

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def pipeline(self):
        cmds = [self.command()]
        while self.peek()[0] == "pipe":
            self.i += 1
            cmds.append(self.command())
        return ("pipe", cmds)

    def command(self):
        args = []
        while self.peek()[0] in ("str", "int", "field", "ident", "lparen"):
            args.append(self.operand())
        if not args:
            raise RenderError(f"{self.where}: empty command")
        return args

    def operand(self):
        k, v = self.toks[self.i]
        self.i += 1
        if k == "lparen":
            p = self.pipeline()
            if self.peek()[0] != "rparen":
                raise RenderError(f"{self.where}: missing `)`")
            self.i += 1
            return p
        if k == "str":
            return ("lit", json.loads(v))
        if k == "int":
            return ("lit", int(v))
        if k == "ident":
            if v not in FUNCS:
                raise RenderError(f"{self.where}: function `{v}` is not in the subset this renderer knows")
            return ("fn", v)
        return ("field", v)

    def eval(self, ctx, node=None):
        node = self.tree if node is None else node
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "field":
            return self.field(ctx, node[1])
        if kind == "fn":
            return self.call(node[1], [])
        if kind == "pipe":
            val, first = None, True
            for cmd in node[1]:
                extra = [] if first else [val]
                val = self.run(ctx, cmd, extra)
                first = False
            return val
        raise RenderError(f"{self.where}: bad node {kind}")

    def run(self, ctx, cmd, extra):
        if cmd[0][0] == "fn":
            return self.call(cmd[0][1], [self.eval(ctx, a) for a in cmd[1:]] + extra)
        if len(cmd) > 1 or extra:
            raise RenderError(f"{self.where}: only a function takes arguments")
        return self.eval(ctx, cmd[0])

    def call(self, name, args):
        n, f = FUNCS[name]
        if n is not None and len(args) != n or n is None and not args:
            raise RenderError(f"{self.where}: {name} takes {n or 'at least 1'} argument(s), not {len(args)}")
        return f(*args)

    def field(self, ctx, path):
        node = ctx
        for p in path.split(".")[1:]:
            if p == "":
                continue
            if not isinstance(node, dict):
                raise RenderError(f"{self.where}: nil pointer evaluating `{path}` (at `{p}`)")
            node = node.get(p)
        return node


ACTION = re.compile(r"\{\{(- )?(.*?)( -)?\}\}", re.S)


def parse(text, where):
    """A list of nodes: str, ("out", Expr), ("if", Expr, then, else)."""
    pieces, pos = [], 0
    for m in ACTION.finditer(text):
        pieces.append(["text", text[pos:m.start()]])
        pieces.append(["act", m.group(2).strip(), bool(m.group(1)), bool(m.group(3))])
        pos = m.end()
    pieces.append(["text", text[pos:]])
    for i, p in enumerate(pieces):
        if p[0] == "act":
            if p[2]:
                pieces[i - 1][1] = pieces[i - 1][1].rstrip(" \t\r\n")
            if p[3]:
                pieces[i + 1][1] = pieces[i + 1][1].lstrip(" \t\r\n")
    line = 1

    def block(it, closers):
        nonlocal line
        nodes = []
        for p in it:
            if p[0] == "text":
                nodes.append(p[1])
                line += p[1].count("\n")
                continue
            src = p[1]
            at = f"{where}:{line}"
            word = src.split()[0] if src.split() else ""
            if word in ("end", "else") and src == word:
                if word not in closers:
                    raise RenderError(f"{at}: `{{{{ {word} }}}}` without `if`")
                return nodes, word
            if word == "if":
                cond = Expr(src[2:], at)
                then, how = block(it, ("end", "else"))
                other = []
                if how == "else":
                    other, how = block(it, ("end",))
                nodes.append(("if", cond, then, other))
                continue
            if word in ("range", "with", "define", "template", "include", "block", "define") or src.startswith("/*"):
                raise RenderError(f"{at}: `{word}` is not in the subset this renderer knows")
            nodes.append(("out", Expr(src, at)))
        if closers:
            raise RenderError(f"{where}: `if` without `end`")
        return nodes, None

    nodes, _ = block(iter(pieces), ())
    return nodes


def execute(nodes, ctx):
    out = []
    for n in nodes:
        if isinstance(n, str):
            out.append(n)
        elif n[0] == "out":
            out.append(go_str(n[1].eval(ctx)))
        else:
            out.append(execute(n[2] if truth(n[1].eval(ctx)) else n[3], ctx))
    return "".join(out)


# --- chart ----------------------------------------------------------------------

INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
    "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
    "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
]


def kind_key(kind):
    """helm's lessByKind: known kinds in install order, then unknown ones by
    name; a stable sort keeps the order within a kind."""
    if kind in INSTALL_ORDER:
        return (0, INSTALL_ORDER.index(kind), "")
    return (1, 0, kind)


def render(chart, namespace="default", release="nrm", files=(), sets=()):
    with open(os.path.join(chart, "Chart.yaml")) as f:
        meta = yaml.safe_load(f)
    if meta.get("apiVersion") != "v2":
        raise RenderError(f"{chart}/Chart.yaml: apiVersion must be v2")
    with open(os.path.join(chart, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    for path in files:
        with open(path) as f:
            values = merge(values, yaml.safe_load(f) or {})
    for s in sets:
        set_value(values, s)
    ctx = {
        "Values": values,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
        "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta.get("appVersion")},
    }
    tdir = os.path.join(chart, "templates")
    docs = []
    for name in sorted(os.listdir(tdir)):
        if name.startswith("_") or not name.endswith((".yaml", ".yml", ".tpl")):
            continue
        if name.endswith(".tpl"):
            raise RenderError(f"{tdir}/{name}: partials are not in the subset this renderer knows")
        with open(os.path.join(tdir, name)) as f:
            text = execute(parse(f.read(), f"{tdir}/{name}"), ctx)
        for d in re.split(r"(?:^|\n)---[ \t]*(?=\n|$)", text):
            if d.strip() == "":
                continue
            try:
                head = yaml.safe_load(d)
            except yaml.YAMLError as e:
                raise RenderError(f"{tdir}/{name}: the rendered document is not YAML: {e}\n{d}")
            kind = head.get("kind", "") if isinstance(head, dict) else ""
            docs.append((kind, d.strip("\n") + "\n"))
    docs.sort(key=lambda kd: kind_key(kd[0]))
    return "".join("---\n" + d for _, d in docs)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Render a chart like `helm template` (a subset).")
    ap.add_argument("chart")
    ap.add_argument("-n", "--namespace", default="default")
    ap.add_argument("--release", default="nrm")
    ap.add_argument("-f", "--values", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args(argv)
    try:
        sys.stdout.write(render(a.chart, a.namespace, a.release, a.values, a.set))
    except (RenderError, OSError, yaml.YAMLError) as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

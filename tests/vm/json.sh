# Sourced by the VM tests (scan-check.sh, pci-check.sh): JSON read without jq.

# flatten < JSON: one "path=value" line per scalar and "path#=length" per
# array (paths like numaNodes.0.distances.1), by python3 when it works, by
# awk otherwise.
if python3 -c 'import json' >/dev/null 2>&1; then
  flatten () {
    python3 -c '
import json, sys
def walk(p, v):
    if isinstance(v, dict):
        for k, x in v.items(): walk(p + [k], x)
    elif isinstance(v, list):
        print(".".join(p) + "#=" + str(len(v)))
        for i, x in enumerate(v): walk(p + [str(i)], x)
    elif v is None: print(".".join(p) + "=null")
    elif isinstance(v, bool): print(".".join(p) + "=" + ("true" if v else "false"))
    else: print(".".join(p) + "=" + str(v))
walk([], json.load(sys.stdin))'
  }
else
  flatten () {
    awk '
      { s = s $0 "\n" }
      function path(   k, p) { p = ""; for (k = 1; k <= d; k++) p = p (k > 1 ? "." : "") key[k]; return p }
      function begin_value() { if (d > 0 && typ[d] == "a") has[d] = 1 }
      END {
        n = length(s); i = 1; d = 0
        while (i <= n) {
          c = substr(s, i, 1)
          if (c ~ /[ \t\n\r:]/) { i++; continue }
          if (c == "{" || c == "[") {
            begin_value(); d++; typ[d] = (c == "{") ? "o" : "a"; has[d] = 0; idx[d] = 0
            key[d] = (c == "[") ? "0" : ""; want[d] = 1; i++; continue
          }
          if (c == "}" || c == "]") {
            if (c == "]") { d--; print path() "#=" (has[d + 1] ? idx[d + 1] + 1 : 0) } else d--
            i++; continue
          }
          if (c == ",") { if (typ[d] == "a") key[d] = ++idx[d]; else want[d] = 1; i++; continue }
          if (c == "\"") {
            j = i + 1; str = ""
            while (j <= n) {
              ch = substr(s, j, 1)
              if (ch == "\\") { str = str substr(s, j + 1, 1); j += 2; continue }
              if (ch == "\"") break
              str = str ch; j++
            }
            i = j + 1
            if (typ[d] == "o" && want[d]) { key[d] = str; want[d] = 0; continue }
            begin_value(); print path() "=" str; continue
          }
          j = i
          while (j <= n && substr(s, j, 1) !~ /[,}\] \t\n\r]/) j++
          begin_value(); print path() "=" substr(s, i, j - i); i = j
        }
      }'
  }
fi
get () { sed -n "s/^$(printf '%s' "$1" | sed 's/[.[\*^$]/\\&/g')=//p" "$2" | head -n 1; }

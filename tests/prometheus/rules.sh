#!/bin/sh
# The alerting rules deploy/prometheus/nrm-rules.yaml with promtool (Debian
# package prometheus): they load (promtool check rules), every alert fires
# when and with what tests/prometheus/rules-test.yaml says and stays quiet
# where it says (promtool test rules), and every alert of the file has such
# a test. A real Prometheus evaluating them on a real plugin: live.py.
command -v promtool >/dev/null || { echo "SKIP: promtool is not installed (Debian package prometheus)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 is not installed"; exit 77; }
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml is not installed"; exit 77; }
top=${NRM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
rules=$top/deploy/prometheus/nrm-rules.yaml
promtool check rules "$rules" || { echo "FAIL: promtool check rules $rules"; exit 1; }
# promtool reads the rule files relative to the test file.
(cd "$top/tests/prometheus" && promtool test rules rules-test.yaml) || { echo "FAIL: promtool test rules"; exit 1; }
exec python3 - "$rules" "$top/tests/prometheus/rules-test.yaml" <<'PY'
import sys
import yaml
alerts = {r["alert"] for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"] if "alert" in r}
tested = {t["alertname"] for case in yaml.safe_load(open(sys.argv[2]))["tests"]
          for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
missing = sorted(alerts - tested)
print(("FAIL" if missing else "ok  ") + f" every alert fires in a test ({len(alerts)} alerts)"
      + (": none for " + ", ".join(missing) if missing else ""))
sys.exit(1 if missing else 0)
PY

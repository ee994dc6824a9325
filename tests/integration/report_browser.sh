#!/usr/bin/env bash
# fnvlp-report's page as a user sees it: headless Chromium (Debian's, env/install-debian.sh)
# renders REPORT_DIR/report.html inside a checking page and
#   - every image has loaded (complete, naturalWidth > 0), and there is at least one;
#   - the page writes nothing to the console (it has no script: any message is an error);
#   - every line of the Summary section, and the figures report.json gives for it (the last step,
#     per modality the mean threshold errors), are in the rendered text.
# With SHOT, also a screenshot of its first screen (1280 x 1000 CSS pixels) into SHOT.
#   report_browser.sh REPORT_DIR [SHOT.png]
set -euo pipefail
dir=$(cd "$1" && pwd)
shot=${2:-}
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "FAIL: chromium not installed (bash env/install-debian.sh installs it)"; exit 1; }
if [ ! -s "$dir/report.html" ] || [ ! -s "$dir/report.json" ]; then echo "FAIL: no report in $dir"; exit 1; fi
check=$(mktemp "$dir/.browser-check.XXXXXX.html")
tmp=$(mktemp -d)
trap 'rm -rf "$check" "$tmp"' EXIT
cat >"$check" <<'HTML'
<!doctype html><html><body>
<iframe id="page" src="report.html" width="1280" height="1000"></iframe>
<pre id="result">the report did not load</pre>
<script>
document.getElementById("page").addEventListener("load", () => {
  const d = document.getElementById("page").contentDocument;
  const images = Array.from(d.images).map(
      i => ({src: i.getAttribute("src"), loaded: i.complete && i.naturalWidth > 0}));
  document.getElementById("result").textContent =
      "RESULT " + JSON.stringify({images: images, text: d.body.innerText});
});
</script></body></html>
HTML
# A fresh profile each run; --allow-file-access-from-files lets the checking page read the frame.
flags=(--headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile"
  --allow-file-access-from-files --virtual-time-budget=15000 --enable-logging=stderr --v=0)
timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$check" >"$tmp/dom.html" 2>"$tmp/log" ||
  { tail -n 20 "$tmp/log"; echo "FAIL: chromium exited $?"; exit 1; }
/usr/bin/python3 - "$tmp/dom.html" "$tmp/log" "$dir" <<'PY'
import html, json, re, sys
dom, log, d = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
m = re.search(r"RESULT (\{.*\})</pre>", dom, re.S)
assert m, "the checking page got no result: " + dom[-500:]
r = json.loads(html.unescape(m.group(1)))
imgs, text = r["images"], " ".join(r["text"].split())
bad = [i["src"] for i in imgs if not i["loaded"]]
assert imgs and not bad, "images not loaded: %s (of %d)" % (bad, len(imgs))
console = [l for l in log.splitlines() if "CONSOLE" in l and "report.html" in l]
assert not console, "console messages: %s" % console
src = open(d + "/report.html").read()
summary = re.search(r"<h2>Summary</h2>\s*<ul>(.*?)</ul>", src, re.S)
assert summary, "report.html has no Summary list"
lines = [" ".join(html.unescape(re.sub(r"<[^>]+>", "", li)).split())
         for li in re.findall(r"<li[^>]*>(.*?)</li>", summary.group(1), re.S)]
missing = [l for l in lines if l not in text]
assert lines and not missing, "summary lines not rendered: %s" % missing
rep = json.load(open(d + "/report.json"))
figures = []
last = rep.get("run", {}).get("last", {})
if "step" in last:
    figures.append("step %d" % last["step"])
for m in ("image", "text"):
    for method in ("glofnd", "fnc"):
        e = rep.get("stats", {}).get(m, {}).get(method, {}).get("mean_abs_error")
        if e is not None:
            figures.append("%.4f" % e)
absent = [f for f in figures if f not in text]
assert not absent, "figures of report.json not on the page: %s" % absent
print("browser: %d images loaded, no console message, %d summary lines and %d figures rendered"
      % (len(imgs), len(lines), len(figures)))
PY
if [ -n "$shot" ]; then
  timeout 120 "$browser" "${flags[@]}" --hide-scrollbars --window-size=1280,1000 \
    --screenshot="$shot" "file://$dir/report.html" >/dev/null 2>"$tmp/shot.log" ||
    { tail -n 20 "$tmp/shot.log"; echo "FAIL: screenshot"; exit 1; }
  [ -s "$shot" ] || { echo "FAIL: no screenshot written"; exit 1; }
  echo "screenshot: $shot"
fi

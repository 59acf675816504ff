#!/bin/sh
# Rebuilds the vendored JavaScript of the HTML report from npm (pinned versions), with the licences.
# The output is checked in: reports work offline and the package needs no npm at install time.
#   cli/html/vendor/build.sh
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
npm init -y >/dev/null
npm install --silent --no-audit --no-fund \
  d3-flame-graph@5.0.0 d3-selection@3.0.0 d3-format@3.1.0 d3-array@3.2.4 d3-hierarchy@3.1.2 \
  d3-scale@4.0.2 d3-ease@3.0.1 d3-transition@3.0.1 d3-dispatch@3.0.1 d3-zoom@3.0.0 esbuild@0.25.12
# Only the d3 modules the flame graph and the timeline use, as one global `d3`.
cat > entry.js <<'JS'
export { select, selectAll } from "d3-selection";
export { format } from "d3-format";
export { ascending } from "d3-array";
export { hierarchy, partition } from "d3-hierarchy";
export { scaleLinear } from "d3-scale";
export { easeCubic } from "d3-ease";
export { transition } from "d3-transition";
export { dispatch } from "d3-dispatch";
export { zoom, zoomIdentity } from "d3-zoom";
JS
npx esbuild entry.js --bundle --minify --format=iife --global-name=d3 --legal-comments=none --outfile="$HERE/d3.min.js"
cp node_modules/d3-flame-graph/dist/d3-flamegraph.umd.min.js "$HERE/d3-flamegraph.min.js"
# kept xz-compressed in the tree (cli/formats/html.py decompresses them into the report)
xz -9e -f "$HERE/d3.min.js" "$HERE/d3-flamegraph.min.js"
cp node_modules/d3-flame-graph/LICENSE "$HERE/LICENSE.d3-flame-graph.txt"
: > "$HERE/LICENSE.d3.txt"
for m in d3-selection d3-format d3-array d3-hierarchy d3-scale d3-ease d3-transition d3-dispatch d3-zoom \
         d3-interpolate d3-color d3-timer d3-drag internmap d3-time d3-time-format; do
  [ -d "node_modules/$m" ] || continue
  v=$(node -p "require('./node_modules/$m/package.json').version")
  printf '%s %s (ISC)\n\n' "$m" "$v" >> "$HERE/LICENSE.d3.txt"
  cat "node_modules/$m/LICENSE" >> "$HERE/LICENSE.d3.txt"
  printf '\n\n' >> "$HERE/LICENSE.d3.txt"
done
ls -l "$HERE"

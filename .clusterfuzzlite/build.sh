#!/bin/bash -eu
# Builds conform's cargo-fuzz targets into $OUT with their seed corpora, as
# ClusterFuzzLite and OSS-Fuzz expect. Their images run it with a nightly
# toolchain and $SANITIZER set; on a stable toolchain (this project's
# machines) it builds without a sanitizer, which is what works there:
#
#   OUT=/tmp/cflite-out bash .clusterfuzzlite/build.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:?set OUT to the directory the fuzzers go to}"
mkdir -p "$OUT"
cd "$here/fuzz"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
python3 make-seeds.py >/dev/null
if rustc --version | grep -q nightly; then
    # The image's sanitizer (address by default), as cargo-fuzz names it.
    cargo fuzz build -O --sanitizer "${SANITIZER:-address}"
else
    cargo fuzz build -O --sanitizer none
fi
triple="$(rustc -vV | sed -n 's/^host: //p')"
for target in $(cargo fuzz list); do
    cp "target/$triple/release/$target" "$OUT/"
    python3 - "$OUT/${target}_seed_corpus.zip" "corpus/$target" <<'PY'
import pathlib, sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for f in sorted(pathlib.Path(sys.argv[2]).glob("seed-*")):
        z.write(f, f.name)
PY
done
ls "$OUT"

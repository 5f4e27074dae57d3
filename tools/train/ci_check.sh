#!/usr/bin/env bash
# ctest's entry to the demo trainer's checks (tests/CMakeLists.txt, label `train`):
#   ci_check.sh selftest   tools/train/test_train.py (scans, gradcheck, model = numpy reference, resume)
#   ci_check.sh evaluate   evaluate.py --quick --check: a subset of the model card's numbers,
#                          re-measured from the shipped files, against resources/models/evaluation.json
# Exit 77 (ctest: skipped) where Debian's python3-torch / python3-numpy or spm_export_vocab is missing,
# or (evaluate) the GNU manuals the models were trained on (/usr/share/info; images that drop docs).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY=/usr/bin/python3
if ! [[ -x $PY ]] || ! $PY -c "import torch, numpy" 2>/dev/null || ! command -v spm_export_vocab >/dev/null; then
  echo "ci_check.sh: /usr/bin/python3 with torch and numpy, or spm_export_vocab, is missing: skipped"
  exit 77
fi
case "${1:-}" in
  selftest) exec "$PY" "$HERE/test_train.py" ;;
  evaluate)
    for f in coreutils.info.gz diffutils.info.gz sed.info.gz grep.info.gz find.info-1.gz find.info-2.gz gzip.info.gz; do
      [[ -f /usr/share/info/$f ]] || { echo "ci_check.sh: /usr/share/info/$f is missing (documentation not installed): skipped"; exit 77; }
    done
    exec "$PY" "$HERE/evaluate.py" --quick --check "$ROOT/resources/models/evaluation.json" ;;
  *) echo "usage: ci_check.sh selftest|evaluate" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The report's outputs, byte for byte, at two commits (issue #32: a change of
# structure must not change the report). Each commit is exported in turn into
# the same folder and runs the default suite there (`cargo coverage`, i.e.
# `cargo test --test collectives --test coverage_report`, on
# configs/local.json) from a fresh build cache; then every file of both
# `report/` folders is compared after the normalizations below, and any other
# difference fails. The same folder for both commits keeps every absolute
# path (sources, build, workspace) the same, so no path is normalized.
#
# The trials themselves are not deterministic (threads and MPI ranks race
# through the fixture's spin loops, so some execution counts differ from run
# to run, and so do durations). So that the comparison can fail only on the
# report, the head's report is also made from a copy of the base's own
# workspace (its results and profiles): `report-on-base`, compared with the
# base's report byte for byte but for the normalizations below. The two
# runs are compared as well, with the run's own variation masked too.
#
# Normalized, each named in the output when it applied:
#   timestamps   ISO-8601 times (meta.json, html/index.html) and llvm-cov's
#                `Created: YYYY-MM-DD HH:MM`, Cobertura's `timestamp="…"`
#   run ids      `<time>-<pid>` run ids (meta.json, summary.md)
#   durations    `duration_s`, `full_suite_duration_s`
#   durations    also `percent_of_full_duration` (minimal-suite.json)
#   order        cobertura.xml's packages, classes and methods, sorted by
#                name: lcov2cobertura writes them in hash order, which
#                changes between two runs of one program
# Between the two runs (not report-on-base) also: execution counts (lcov
# DA/FNDA/BRDA counts, JSON "count", Cobertura hits, llvm-cov's HTML line
# counts, coverage.profdata whole), and the trials the minimal suite
# chooses (it weighs their measured durations).
#
# Usage: scripts/report-identity.sh BASE [HEAD]   (HEAD by default)
# Work folder: target/report-identity (CCL_COV_IDENTITY_DIR), its own
# CARGO_TARGET_DIR. CCL_COV_IDENTITY_COMPARE_ONLY=1 compares the reports the
# last call left there, running nothing. With CCL_COV_CARGO_LOCK=/path every cargo command runs
# under `flock` on that file (a shared build machine).
set -euo pipefail

base=${1:?usage: scripts/report-identity.sh BASE [HEAD]}
head=${2:-HEAD}
repo=$(git rev-parse --show-toplevel)
base_rev=$(git -C "$repo" rev-parse --verify "$base^{commit}")
head_rev=$(git -C "$repo" rev-parse --verify "$head^{commit}")
work=${CCL_COV_IDENTITY_DIR:-$repo/target/report-identity}
compare_only=${CCL_COV_IDENTITY_COMPARE_ONLY:-}
cargo_lock=${CCL_COV_CARGO_LOCK:-}
tree=$work/tree
export CARGO_TARGET_DIR=$work/target
mkdir -p "$work"

cargo_() {
    if [ -n "$cargo_lock" ]; then flock "$cargo_lock" cargo "$@"; else cargo "$@"; fi
}

# No CCL_COV_* setting of the caller's reaches the runs (the script's own are read above).
for v in $(compgen -e | grep '^CCL_COV_' || true); do unset "$v"; done
unset GITHUB_STEP_SUMMARY INSTA_UPDATE

# The tree of commit $1 in $tree, once: its files dated now (`tar -m`), so that
# cargo rebuilds the crate whenever the commit changes (git archive would date
# them at their commit, which can be older than the last build).
export_tree() {
    [ "$(cat "$work/tree.rev" 2>/dev/null)" = "$1" ] && return
    rm -rf "$tree" "$work/tree.rev"
    mkdir -p "$tree"
    git -C "$repo" archive "$1" | tar -x -m -C "$tree"
    echo "$1" >"$work/tree.rev"
}

# Every run uses the one workspace $work/ws, so that its paths (profiles.list,
# meta.json) are the same in every report; each run's workspace is kept as
# $work/ws-LABEL and its report as $work/LABEL.

# run_suite LABEL REV: the whole default suite of REV.
run_suite() {
    local label=$1 rev=$2
    echo "== $label: $rev: cargo coverage on configs/local.json"
    export_tree "$rev"
    rm -rf "$CARGO_TARGET_DIR/ccl-coverage" "$work/ws" "$work/ws-$label" "$work/$label"
    (cd "$tree" && CCL_COV_CONFIG=configs/local.json CCL_COV_WORKSPACE="$work/ws" \
        cargo_ test --test collectives --test coverage_report) >"$work/$label.log" 2>&1 ||
        { echo "$label: the suite failed; see $work/$label.log"; tail -30 "$work/$label.log"; exit 1; }
    cp -a "$work/ws/report" "$work/$label"
    mv "$work/ws" "$work/ws-$label"
}

# report_only LABEL REV FROM: REV's coverage_report on a copy of the workspace FROM.
report_only() {
    local label=$1 rev=$2 from=$3
    echo "== $label: $rev: cargo test --test coverage_report on a copy of $from"
    export_tree "$rev"
    rm -rf "$work/ws" "$work/$label"
    cp -a "$from" "$work/ws"
    (cd "$tree" && CCL_COV_CONFIG=configs/local.json CCL_COV_WORKSPACE="$work/ws" \
        cargo_ test --test coverage_report) >"$work/$label.log" 2>&1 ||
        { echo "$label: the report failed; see $work/$label.log"; tail -30 "$work/$label.log"; exit 1; }
    cp -a "$work/ws/report" "$work/$label"
    rm -rf "$work/ws"
}

# normalize FILE [counts]: the file's text with what is inherently variable masked.
normalize() {
    local file=$1 counts=${2:-}
    case "$file" in
        *.profdata) [ -n "$counts" ] && { echo "[profdata: merged counts]"; return; } ;;
        */cobertura.xml) cobertura_sorted "$file" | mask "$counts"; return ;;
        */minimal-suite.json) [ -n "$counts" ] && { minimal_suite_totals "$file"; return; } ;;
    esac
    mask "$counts" <"$file"
}

mask() {
    local counts=$1
    local sed_args=(
        -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z(-[0-9]+)?/[time]/g'
        -e 's/Created: [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}/Created: [time]/g'
        -e 's/timestamp="[0-9]+"/timestamp="[time]"/g'
        -e 's/"(duration_s|full_suite_duration_s|percent_of_full_duration)": *[0-9.e+-]+/"\1": [seconds]/g'
    )
    if [ -n "$counts" ]; then
        sed_args+=(-e 's/^(DA:[0-9]+),[0-9]+/\1,[n]/' -e 's/^(FNDA:)[0-9]+/\1[n]/' -e 's/^(BRDA:[0-9]+,[0-9]+,[0-9]+),[0-9]+/\1,[n]/'
            -e 's/"count": *[0-9]+/"count": [n]/g' -e "s/(hits|count)=['\"][0-9]+['\"]/\\1=[n]/g" -e 's#<pre>[0-9.]+[kMGTPE]?</pre>#<pre>[n]</pre>#g')
    fi
    sed -E "${sed_args[@]}"
}

# lcov2cobertura writes its packages and classes in hash order, which
# changes from run to run of the same program: sorted by name here.
cobertura_sorted() {
    python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
tree = ET.parse(sys.argv[1])
for parent in tree.iter():
    if parent.tag in ("packages", "classes", "methods"):
        parent[:] = sorted(parent, key=lambda e: (e.get("name") or "", e.get("filename") or ""))
ET.indent(tree)
sys.stdout.write(ET.tostring(tree.getroot(), encoding="unicode") + "\n")
PY
}

# Which trials the minimal suite takes weighs each trial's measured
# duration: between two runs only what it covers is compared.
minimal_suite_totals() {
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ("full_suite_trials","lines","functions","branches")})' "$1"
}

# compare A B [counts]: every file of both folders, normalized; 0 when the same.
compare() {
    local a=$1 b=$2 counts=${3:-} bad=0
    local la lb
    la=$(cd "$a" && find . -type f | LC_ALL=C sort)
    lb=$(cd "$b" && find . -type f | LC_ALL=C sort)
    if [ "$la" != "$lb" ]; then
        echo "the file lists differ:"
        diff <(echo "$la") <(echo "$lb") || true
        bad=1
    fi
    local n=0 raw=0
    while IFS= read -r f; do
        [ -f "$b/$f" ] || continue
        n=$((n + 1))
        if cmp -s "$a/$f" "$b/$f"; then raw=$((raw + 1)); continue; fi
        if ! diff -q <(normalize "$a/$f" "$counts") <(normalize "$b/$f" "$counts") >/dev/null; then
            echo "differs: $f"
            diff <(normalize "$a/$f" "$counts") <(normalize "$b/$f" "$counts") | head -20 || true
            bad=1
        fi
    done <<<"$la"
    echo "$n files compared: $raw identical as they are, $((n - raw)) identical once normalized$([ $bad = 0 ] || echo ', or different (above)')"
    return $bad
}

# The head's report on the base's workspace before the head's own run: the
# base's build.json names the cached build, which the head's run rebuilds.
if [ -z "$compare_only" ]; then
    run_suite base "$base_rev"
    report_only report-on-base "$head_rev" "$work/ws-base"
    run_suite head "$head_rev"
fi

status=0
echo "== base's report against the head's report of the base's own workspace (report-on-base)"
compare "$work/base" "$work/report-on-base" || status=1
echo "== base's run against the head's run (execution counts masked: the trials race)"
compare "$work/base" "$work/head" counts || status=1
[ $status = 0 ] && echo "report-identity: the same report at $base_rev and $head_rev" ||
    echo "report-identity: the reports differ (above)"
exit $status

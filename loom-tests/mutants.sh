#!/usr/bin/env bash
# Proof that the loom models can fail (docs/testing.md, "loom models").
#
# For each entry below: copy the working tree to a scratch directory, apply ONE one-line
# change to production code there, run the model that must catch it, and expect it to FAIL.
# The working tree itself is never modified (other engineers may be editing those crates).
#
#   loom-tests/mutants.sh            # every mutant
#   loom-tests/mutants.sh 2a 5b      # only these
#
# Exit status 1 if a mutant survives (its model passed).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/loom-mutants.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
# `-m`: fresh mtimes, so cargo rebuilds every workspace crate from the scratch sources.
tar -C "$root" --exclude=./target --exclude=./.git --exclude=./.venv -cf - . | tar -C "$scratch" -xmf -

export RUSTFLAGS="--cfg txn_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
# A target dir of its own: cargo names workspace artifacts by their path relative to the
# workspace root, so a scratch copy would overwrite (and poison) target/loom's artifacts.
target="$root/target/loom-mutants"
survived=0

# name | model (test file) | production file | exact text | replacement
mutants=(
  "1a|zombie_fencing|coordinator/src/engine.rs|            Ongoing \| Empty => is_current,|            Ongoing \| Empty => true,"
  "2a|failover|txn-log/src/mem.rs|        match self.live.stored_epoch(p) {|        match self.live.stored_epoch(p).map(\|_\| e) {"
  "2b|failover|markers/src/participant/state.rs|        if current_ce > marker.coordinator_epoch {|        if false \&\& current_ce > marker.coordinator_epoch {"
  "3a|reaper_vs_end_txn|coordinator/src/engine.rs|            (CompleteAbort, Abort, true) \| (CompleteCommit, Commit, true) => {|            (CompleteAbort, _, true) \| (CompleteCommit, Commit, true) => {"
  "4a|marker_fan_in|markers/src/writer/planner.rs|            .is_some_and(\|dec\| dec.parts.is_empty())|            .is_some_and(\|dec\| dec.parts.len() <= 1)"
  "5a|crash_reload|txn-log/src/mem.rs|        if t.seq <= self.durable_seq {|        if t.seq <= self.next_seq {"
  "5b|crash_reload|txn-log/src/mem.rs|        inner.live = inner.durable.clone();|        // inner.live = inner.durable.clone();"
  "6a|pid_blocks|txn-log/src/mem.rs|        let first = self.live.next_producer_id;|        let first = self.durable.next_producer_id;"
  "6b|pid_blocks|coordinator/src/pid.rs|        if s.next >= s.end {|        if s.next > s.end {"
  "7a|ownership_handover|txn-log/src/mem.rs|        match self.live.stored_epoch(p) {|        match self.live.stored_epoch(p).map(\|_\| e) {"
  "7b|ownership_handover|coordinator/src/engine.rs|        if ErrorCode::append_error_loses_partition(&err) {|        if false \&\& ErrorCode::append_error_loses_partition(&err) {"
  "7c|ownership_handover|txn-log/src/mem.rs|            \&\& e < current|            \&\& e < current \&\& false"
  "7d|ownership_handover|txn-log/src/mem.rs|        let next = next_epoch(p, self.live.stored_epoch(p))?;|        let next = self.live.stored_epoch(p).unwrap_or(CoordinatorEpoch(0));"
)

for entry in "${mutants[@]}"; do
  # Not `read -r`: the table escapes literal '|' (and '&') with a backslash.
  IFS='|' read name test file old new <<<"$entry"
  if [ "$#" -gt 0 ] && [[ " $* " != *" $name "* ]]; then
    continue
  fi
  f="$scratch/$file"
  cp "$f" "$f.orig"
  python3 - "$f" "$old" "$new" <<'EOF'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
n = text.count(old)
if n != 1:
    sys.exit(f"{path}: expected exactly one match of {old!r}, found {n} (production code changed?)")
open(path, "w").write(text.replace(old, new))
EOF
  echo "== mutant $name ($file) against model $test"
  echo "   - $old"
  echo "   + $new"
  set +e
  out="$(cd "$scratch" && cargo test -q -p loom-tests --release --target-dir "$target" --test "$test" 2>&1)"
  rc=$?
  set -e
  # Restore with a fresh mtime, so cargo rebuilds the crate for the next mutant.
  cat "$f.orig" >"$f"
  rm "$f.orig"
  if [ "$rc" -eq 0 ]; then
    echo "   SURVIVED: the model passed"
    survived=1
  else
    echo "   KILLED: the model failed:"
    grep -E -A3 "panicked at" <<<"$out" | grep -v "^--$" | head -6 | sed 's/^/     /'
  fi
done
exit "$survived"

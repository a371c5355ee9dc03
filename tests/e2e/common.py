"""Shared helpers for the end-to-end client programs.

Every program writes one JSON object per line on stdout ("ev" names the event) and flushes
after each line, so the Rust harness can follow a run while it happens and check the whole
history afterwards. Diagnostics go to stderr.
"""

import json
import sys
import time


def emit(ev, **fields):
    """Writes one event line on stdout."""
    fields["ev"] = ev
    fields["t"] = round(time.time(), 3)
    sys.stdout.write(json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def log(*args):
    """Writes a diagnostic line on stderr."""
    print(time.strftime("%H:%M:%S"), *args, file=sys.stderr, flush=True)


def parse_partitions(text):
    """'0,1,2' -> [0, 1, 2]."""
    return [int(p) for p in text.split(",") if p != ""]


def parse_pattern(text):
    """'CCAC' -> ['commit', 'commit', 'abort', 'commit']."""
    out = []
    for ch in text:
        if ch in "Cc":
            out.append("commit")
        elif ch in "Aa":
            out.append("abort")
        else:
            raise SystemExit("bad pattern character %r (use C and A)" % ch)
    return out


def tagged(prefix, tag, partitions):
    """(partition, "<prefix>-<tag>-p<partition>") for each of `partitions`: distinct values."""
    return [(p, "%s-%s-p%d" % (prefix, tag, p)) for p in partitions]


def txn_values(prefix, txn, partitions, per_partition):
    """The (partition, value) pairs of transaction txn: per_partition messages on each of
    partitions, message k on partition p unique as "<prefix>-t<txn>-p<p>-m<k>"."""
    return [
        (p, "%s-t%d-p%d-m%d" % (prefix, txn, p, k))
        for k in range(per_partition)
        for p in partitions
    ]


class Deadline:
    """A bounded wait: every loop in these programs checks one."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def expired(self):
        return self.left() <= 0

"""Failover as a real client sees it: transactional librdkafka producers under coordinator faults.

The driver of bench/run.sh's `failover` scenario (the faults themselves are injected by the
scenario, in bash, which also owns every server process). Subcommands:

    produce   N transactional producers (one process each, librdkafka's default settings except
              bootstrap.servers and transactional.id, plus any KEY=VALUE given), each looping
              begin_transaction / 3 records to 3 partitions / commit_transaction until the stop
              file exists. Producer p<i> appends to DIR/p<i>.txt:
                  commit p<i> <epoch-ms> <seq> <monotonic-s>     every acknowledged commit
                  event p<i> <epoch-ms> <what> <error name> <error text>
              and to DIR/p<i>.values the values of every decided transaction:
                  A v...  acknowledged commit        X v...  acknowledged abort
                  N v...  given up before commit_transaction was called (new producer)
                  D v...  in doubt: the producer was replaced while its commit was pending
              With --debug (librdkafka's `debug`), each producer's librdkafka log, timestamped,
              is DIR/p<i>.log (it holds librdkafka's warnings and errors in any case).
    owners    FindCoordinator(TRANSACTION) for ids, asked of the daemons: "<id> <node> <host:port>".
    wait-commits  waits (bounded) until every producer has committed after a time.
    report    the commit gaps around the faults (faults.jsonl, written by the scenario): per fault
              kind p50/p99/max over faults of the longest first gap (last commit before the fault
              to first after) of the victim's producers and of all producers, and of the worst
              gap until the next fault; a table on stdout and JSON lines.
    timeline  where each victim's commit gap went, from the librdkafka debug logs (--debug
              eos,protocol,broker) and the daemon logs: per fault, the request each victim had
              in flight, its requests to the coordinator, long waits, timeouts and refusals; and
              the other producers whose Produce waited (a fault should not touch them).
    verify    consumes the topic read_committed and checks exactly-once against the .values files.

The commit lines of the Java variant (bench/java/FailoverProducer.java, `commit j<i> <epoch-ms>`)
have the same form, so `report` and `wait-commits` read them too.
"""

import argparse
import bisect
import datetime
import glob
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import time


def percentile(sorted_vals, q):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, int(round(q * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def stats(vals):
    s = sorted(v for v in vals if v is not None)
    if not s:
        return {"p50": None, "p99": None, "max": None}
    return {"p50": round(percentile(s, 0.5), 3), "p99": round(percentile(s, 0.99), 3),
            "max": round(s[-1], 3)}


# --- produce ---------------------------------------------------------------------------------


def parse_settings(pairs):
    conf = {}
    for kv in pairs:
        if "=" not in kv:
            sys.exit("not KEY=VALUE: %s" % kv)
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


def produce(args):
    """Parent: one child process per producer (its own stderr, so its own librdkafka log)."""
    os.makedirs(args.dir, exist_ok=True)
    children = []
    for i in range(args.producers):
        cmd = [sys.executable, os.path.abspath(__file__), "produce-one", "--index", str(i),
               "--bootstrap", args.bootstrap, "--topic", args.topic, "--dir", args.dir,
               "--id-prefix", args.id_prefix, "--stop-file", args.stop_file,
               "--max-seconds", str(args.max_seconds), "--records", str(args.records)]
        if args.debug:
            cmd += ["--debug", args.debug]
        cmd += args.settings
        err = open(os.path.join(args.dir, "p%d.log" % i), "ab")
        children.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err))
        err.close()

    def on_term(_sig, _frame):
        open(args.stop_file, "a").close()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    deadline = time.monotonic() + args.max_seconds
    while not os.path.exists(args.stop_file) and time.monotonic() < deadline:
        time.sleep(0.2)
        if all(c.poll() is not None for c in children):
            break
    open(args.stop_file, "a").close()
    # A child may be inside a commit that blocks up to transaction.timeout.ms (60 s by default).
    end = time.monotonic() + 90
    for c in children:
        try:
            c.wait(max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            print("producer pid %d did not stop; killed" % c.pid, file=sys.stderr)
            c.kill()
            c.wait()
    print("producers stopped", flush=True)


def die_with_parent():
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def produce_one(args):
    from confluent_kafka import KafkaException, Producer

    die_with_parent()
    name = "p%d" % args.index
    out = open(os.path.join(args.dir, name + ".txt"), "a", buffering=1)
    vals_out = open(os.path.join(args.dir, name + ".values"), "a", buffering=1)
    conf = {"bootstrap.servers": args.bootstrap, "transactional.id": "%s-%s" % (args.id_prefix, name)}
    if args.debug:
        conf["debug"] = args.debug
    conf.update(parse_settings(args.settings))
    deadline = time.monotonic() + args.max_seconds

    def stopping():
        return os.path.exists(args.stop_file) or time.monotonic() > deadline

    def event(what, err=None):
        e = "" if err is None else "%s %s" % (err.name(), err.str().replace("\n", " "))
        out.write("event %s %.3f %s %s\n" % (name, time.time() * 1000, what, e))

    def new_producer():
        while True:
            p = Producer(conf)
            while True:
                try:
                    p.init_transactions()
                    return p
                except KafkaException as e:
                    err = e.args[0]
                    event("init-failed", err)
                    if stopping():
                        return None
                    if not err.retriable():
                        break
            p.flush(0)
            del p  # a fatal error: a new instance

    p = new_producer()
    partitions = None
    seq = 0
    while p is not None and not stopping():
        if partitions is None:
            try:
                md = p.list_topics(args.topic, timeout=10)
                partitions = sorted(md.topics[args.topic].partitions)
                if not partitions:
                    raise RuntimeError("no partitions")
            except Exception as e:  # noqa: BLE001 - any metadata failure: ask again
                out.write("event %s %.3f metadata-failed %s\n" % (name, time.time() * 1000, e))
                partitions = None
                time.sleep(0.5)
                continue
        seq += 1
        values = ["%s-%s-%d-%d" % (args.id_prefix, name, seq, r) for r in range(args.records)]
        parts = random.sample(partitions, min(args.records, len(partitions)))
        phase = "begin"
        try:
            p.begin_transaction()
            phase = "produce"
            for r, v in enumerate(values):
                p.produce(args.topic, value=v.encode(), partition=parts[r % len(parts)])
            phase = "commit"
            tries = 0
            while True:
                try:
                    p.commit_transaction()
                    break
                except KafkaException as e:
                    err = e.args[0]
                    if err.retriable() and not err.txn_requires_abort() and not err.fatal() and tries < 10:
                        tries += 1
                        event("commit-retry", err)
                        continue
                    raise
            wall, mono = time.time(), time.monotonic()
            vals_out.write("A %s\n" % " ".join(values))
            out.write("commit %s %.3f %d %.6f\n" % (name, wall * 1000, seq, mono))
        except (KafkaException, BufferError) as e:
            err = e.args[0] if isinstance(e, KafkaException) else None
            if err is not None and err.txn_requires_abort() and not err.fatal():
                event("abort", err)
                aborted = False
                for _ in range(10):
                    try:
                        p.abort_transaction()
                        aborted = True
                        break
                    except KafkaException as e2:
                        event("abort-failed", e2.args[0])
                        if not e2.args[0].retriable():
                            break
                if aborted:
                    vals_out.write("X %s\n" % " ".join(values))
                    continue
            # Fatal (or an error librdkafka says to treat as fatal): a new producer instance.
            if err is None:
                out.write("event %s %.3f new-producer-after %s %s\n" % (name, time.time() * 1000, phase, e))
            else:
                event("new-producer-after-" + phase, err)
            vals_out.write("%s %s\n" % ("D" if phase == "commit" else "N", " ".join(values)))
            p = None
            p = new_producer()
    out.close()
    vals_out.close()


# --- owners ----------------------------------------------------------------------------------


def find_coordinator(addr, txn_id, timeout=2.0):
    """FindCoordinator v1 (key type TRANSACTION) sent to addr: (error, node, host, port)."""
    host, port = addr.rsplit(":", 1)
    client = b"failover-bench"
    key = txn_id.encode()
    body = struct.pack(">hhih", 10, 1, 1, len(client)) + client + struct.pack(">h", len(key)) + key + b"\x01"
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        resp = recv_exact(s, size)
    # correlation id, throttle, error, error message (nullable), node, host, port
    off = 4 + 4
    err = struct.unpack_from(">h", resp, off)[0]
    off += 2
    mlen = struct.unpack_from(">h", resp, off)[0]
    off += 2 + max(mlen, 0)
    node = struct.unpack_from(">i", resp, off)[0]
    off += 4
    hlen = struct.unpack_from(">h", resp, off)[0]
    off += 2
    h = resp[off:off + hlen].decode()
    off += hlen
    p = struct.unpack_from(">i", resp, off)[0]
    return err, node, h, p


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def owners(args):
    """Each id's owner, asked of the first daemon that answers without error (bounded)."""
    ask = args.ask.split(",")
    deadline = time.monotonic() + args.timeout
    for txn_id in args.ids:
        answer = None
        while answer is None and time.monotonic() < deadline:
            for addr in ask:
                try:
                    err, node, h, p = find_coordinator(addr, txn_id)
                except OSError:
                    continue
                if err == 0:
                    answer = "%s %d %s:%d" % (txn_id, node, h, p)
                    break
            if answer is None:
                time.sleep(0.2)
        print(answer if answer else "%s -1 none" % txn_id, flush=True)


# --- commit files ----------------------------------------------------------------------------


def split_lines(patterns):
    """The words of every line of every file matching one of the glob `patterns`."""
    for pat in patterns:
        for f in glob.glob(pat):
            with open(f, errors="replace") as fh:
                for line in fh:
                    yield line.split()


def read_commits(patterns):
    """{producer: sorted [epoch seconds]} from every `commit <producer> <epoch-ms> ...` line."""
    commits = {}
    for parts in split_lines(patterns):
        if len(parts) >= 3 and parts[0] == "commit":
            try:
                commits.setdefault(parts[1], []).append(float(parts[2]) / 1000)
            except ValueError:
                pass
    for v in commits.values():
        v.sort()
    return commits


def read_events(patterns):
    """{"<what> <error>": count} from every `event <producer> <epoch-ms> <what> <error> ...` line."""
    events = {}
    for parts in split_lines(patterns):
        if len(parts) >= 4 and parts[0] == "event":
            k = " ".join(parts[3:5]).rstrip(":")
            events[k] = events.get(k, 0) + 1
    return events


def wait_commits(args):
    """Exit 0 once each of the producers (or every producer seen) committed after --since."""
    deadline = time.monotonic() + args.timeout
    while True:
        commits = read_commits(args.commits)
        names = args.producers.split(",") if args.producers else list(commits)
        late = [n for n in names if not commits.get(n) or commits[n][-1] <= args.since]
        if names and not late:
            return 0
        if time.monotonic() > deadline:
            print("no commit after %.3f within %.0f s: %s" % (args.since, args.timeout, " ".join(sorted(late))),
                  file=sys.stderr)
            return 1
        time.sleep(0.2)


# --- report ----------------------------------------------------------------------------------


def gaps_at(times, t, end):
    """One producer's commits `times` around a fault at t whose window ends at `end` (the next
    fault, or the end of the run): (first gap, worst gap, stalled). The first gap runs from the
    last commit before t to the first after it; the worst gap is the longest interval between
    consecutive commits from the first gap on that ends by `end` (the first gap, or a later stall
    while the fault is recovered from: a resume, an etcd member's restart)."""
    i = bisect.bisect_right(times, t)
    if i == 0:
        return None, None, False
    if i == len(times):
        return None, None, True
    first = times[i] - times[i - 1]
    worst = first
    j = i
    while j + 1 < len(times) and times[j + 1] <= end:
        worst = max(worst, times[j + 1] - times[j])
        j += 1
    return first, worst, False


def report(args):
    commits = read_commits(args.commits)
    faults = []
    with open(args.faults) as fh:
        for line in fh:
            line = line.strip()
            if line:
                f = json.loads(line)
                if f.get("client", args.client) == args.client:
                    faults.append(f)
    faults.sort(key=lambda f: f["t"])
    rows, per_fault = [], []
    kinds = []
    for f in faults:
        if f["kind"] not in kinds:
            kinds.append(f["kind"])
    # Baseline: every interval between consecutive commits before the first fault (each
    # producer's first commit is after its init_transactions, so set-up is not in it).
    if faults and commits:
        t1 = faults[0]["t"]
        iv = []
        for v in commits.values():
            w = [x for x in v if x <= t1]
            iv += [b - a for a, b in zip(w, w[1:])]
        rows.append({"fault": "none (baseline)", "count": len(iv), "victim": stats([]), "all": stats(iv),
                     "worst": stats([]), "stalled": 0})
    ends = [f["t"] for f in faults[1:]] + [float("inf")]
    for kind in kinds:
        victim_max, all_max, worst_max, stalled = [], [], [], 0
        for f, end in ((f, e) for f, e in zip(faults, ends) if f["kind"] == kind):
            first, worst = {}, {}
            for name, times in commits.items():
                g, w, st = gaps_at(times, f["t"], end)
                first[name], worst[name] = g, w
                stalled += st
            vg = [first[n] for n in f.get("victim_producers", []) if first.get(n) is not None]
            ag = [g for g in first.values() if g is not None]
            wg = [g for g in worst.values() if g is not None]
            victim_max.append(max(vg) if vg else None)
            all_max.append(max(ag) if ag else None)
            worst_max.append(max(wg) if wg else None)
            rnd = lambda d: {n: (None if g is None else round(g, 3)) for n, g in sorted(d.items())}  # noqa: E731
            per_fault.append({**f, "window_end": None if end == float("inf") else end,
                              "first_gap_s": rnd(first), "worst_gap_s": rnd(worst)})
        rows.append({"fault": kind, "count": len(all_max), "victim": stats(victim_max), "all": stats(all_max),
                     "worst": stats(worst_max), "stalled": stalled})
    fmt = lambda x: "-" if x is None else "%.2f" % x  # noqa: E731
    lines = [
        "commit gap in s, %s: from each producer's last commit before the fault to its first after it "
        "(victim: the longest among the producers the victim coordinated; all: the longest of all); "
        "worst: the longest gap between two commits of any producer until the next fault; "
        "p50/p99/max over faults. Lease %s ms, extra settings: %s"
        % (args.client, args.lease_ms, args.extra or "none"),
        "%-10s %-18s %5s | %-23s | %-23s | %-23s | %7s" % ("client", "fault", "n", "first gap, victim's",
                                                           "first gap, all", "worst gap, all", "stalled"),
        "%-10s %-18s %5s | %7s %7s %7s | %7s %7s %7s | %7s %7s %7s |" % (
            "", "", "", "p50", "p99", "max", "p50", "p99", "max", "p50", "p99", "max")]
    for r in rows:
        lines.append("%-10s %-18s %5d | %7s %7s %7s | %7s %7s %7s | %7s %7s %7s | %7d" % (
            args.client, r["fault"], r["count"],
            *(fmt(r[c][q]) for c in ("victim", "all", "worst") for q in ("p50", "p99", "max")), r["stalled"]))
    events = read_events(args.commits)
    if events:
        lines.append("client errors (%s): %s" % (args.client, ", ".join(
            "%s x%d" % (k, n) for k, n in sorted(events.items(), key=lambda kv: -kv[1]))))
    print("\n".join(lines), flush=True)
    if args.json_out:
        with open(args.json_out, "a") as fh:
            if events:
                fh.write(json.dumps({"scenario": "failover-client-errors", "client": args.client,
                                     "events": events}) + "\n")
            for r in rows:
                fh.write(json.dumps({"scenario": "failover", "client": args.client, "fault": r["fault"],
                                     "count": r["count"], "victim_gap_s": r["victim"], "all_gap_s": r["all"],
                                     "worst_gap_s": r["worst"], "stalled": r["stalled"],
                                     "lease_ms": int(args.lease_ms), "extra": args.extra,
                                     "producers": len(commits)}) + "\n")
    if args.gaps_out:
        with open(args.gaps_out, "w") as fh:
            for f in per_fault:
                fh.write(json.dumps(f) + "\n")


# --- timeline --------------------------------------------------------------------------------

LOG_LINE = re.compile(r"^%\d\|(\d+\.\d+)\|(\w+)\|[^|]*\| \[thrd:[^\]]*\]: (.*)$")
LOG_SENT = re.compile(r"(\S+): Sent (\w+)Request \(v\d+.*CorrId (\d+)\)")
LOG_RECV = re.compile(r"(\S+): Received (\w+)Response \(v\d+.*CorrId (\d+), rtt ([\d.]+)ms\)")
LOG_TIMEOUT = re.compile(r"(\S+): Timed out (\w+)Request in flight \(after (\d+)ms")
TXN_APIS = ("EndTxn", "AddPartitionsToTxn", "AddOffsetsToTxn", "FindCoordinator", "InitProducerId")


def log_window(path, a, b):
    """(epoch s, facility, message) of the librdkafka debug lines of `path` from a to b."""
    out = []
    with open(path, errors="replace") as fh:
        for line in fh:
            m = LOG_LINE.match(line)
            if not m:
                continue
            t = float(m.group(1))
            if t > b:
                break
            if t >= a:
                out.append((t, m.group(2), m.group(3)))
    return out


def producer_timeline(lines, t0):
    """What a producer's librdkafka log says between two commits around a fault at t0:
    (the requests in flight at t0, the longest wait for a Produce answer or timeout from t0 on
    in s, notes). The notes are, from t0 on, the coordinator requests sent, every answer that
    took over 0.5 s, timeouts, refused requests and coordinator changes."""
    inflight, notes, at_fault, produce_wait = {}, [], None, 0.0
    for t, fac, msg in lines:
        if at_fault is None and t > t0:
            at_fault = sorted({api for _, api in inflight.values()})
        rel = "%+6.2f" % (t - t0)
        m = LOG_SENT.search(msg)
        if m:
            inflight[(m.group(1), m.group(3))] = (t, m.group(2))
            if t > t0 and m.group(2) in TXN_APIS:
                notes.append("%s sent %s to %s" % (rel, m.group(2), m.group(1)))
            continue
        m = LOG_RECV.search(msg)
        if m:
            sent = inflight.pop((m.group(1), m.group(3)), None)
            waited = float(m.group(4)) / 1000
            if m.group(2) == "Produce" and sent and t > t0:
                produce_wait = max(produce_wait, waited)
            if waited > 0.5:
                notes.append("%s %s answered by %s after %.2f s" % (rel, m.group(2), m.group(1), waited))
            continue
        m = LOG_TIMEOUT.search(msg)
        if m:
            waited = int(m.group(3)) / 1000
            if m.group(2) == "Produce":
                produce_wait = max(produce_wait, waited)
            notes.append("%s %s to %s timed out after %.2f s" % (rel, m.group(2), m.group(1), waited))
        elif t > t0 and (fac == "REQERR" or (fac == "ENDTXN" and "NO_ERROR" not in msg)
                         or (fac == "TXNCOORD" and ("response" in msg or "unknown" in msg))):
            notes.append("%s %s" % (rel, msg[:110]))
    # Repeated notes of the same kind: the first, then how many until when.
    folded = []
    for n in notes:
        rel, key = n.split(None, 1)
        if folded and folded[-1][1] == key:
            folded[-1][2] += 1
            folded[-1][3] = rel
        else:
            folded.append([n, key, 1, None])
    notes = [n if k == 1 else "%s (x%d, the last at %s)" % (n, k, last) for n, _, k, last in folded]
    return at_fault or [], produce_wait, notes


def daemon_lines(path, keys):
    """(epoch s, text) of the lines of a daemon log holding one of `keys`."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, errors="replace") as fh:
        for line in fh:
            line = re.sub(r"\x1b\[[0-9;]*m", "", line)
            if not any(k in line for k in keys):
                continue
            try:
                t = datetime.datetime.strptime(line[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(
                    tzinfo=datetime.timezone.utc).timestamp()
            except ValueError:
                continue
            out.append((t, line.split(None, 2)[2].strip()))
    return out


def timeline(args):
    """Per fault: each victim producer's commit gap with its librdkafka requests (see
    producer_timeline), the takeover and rejoin seen in the daemon logs, and every other
    producer whose Produce waited over --min-wait s from the fault until 5 s after the
    victim was back (a fault should not touch them)."""
    with open(os.path.join(args.dir, "faults.jsonl")) as fh:
        faults = [json.loads(line) for line in fh if line.strip()]
    faults = [f for f in faults if f["kind"] == args.kind]
    commits = read_commits([os.path.join(args.dir, "lr", "p*.txt")])
    daemons = {}
    for path in glob.glob(os.path.join(args.dir, "daemon-*.err")):
        n = os.path.basename(path)[len("daemon-"):-len(".err")]
        daemons[n] = daemon_lines(path, ("members changed",))
    victim_gaps, other_waits = [], []
    for f in faults:
        t0, victim = f["t"], f["victim"].split("-")[-1]
        back = f.get("resumed", f.get("restarted"))

        def changed(after):
            """The first "members changed" of another daemon after `after`."""
            return min((t for n, ls in daemons.items() if n != victim for t, _ in ls if t > after), default=None)
        took, rejoined = changed(t0), changed(back) if back else None
        print("fault %s %d: %s at %.3f%s; survivors' first members change %s, after the resume %s" % (
            f["kind"], f["n"], f["victim"], t0,
            "" if back is None else ", back at %+.2f" % (back - t0),
            "-" if took is None else "%+.2f" % (took - t0),
            "-" if rejoined is None else "%+.2f" % (rejoined - t0)))
        for name, times in sorted(commits.items()):
            i = bisect.bisect_right(times, t0)
            if i == 0 or i == len(times):
                continue
            a, b = times[i - 1], times[i]
            path = os.path.join(args.dir, "lr", name + ".log")
            if not os.path.exists(path):
                continue
            at_fault, _, notes = producer_timeline(log_window(path, a - 0.001, b + 0.001), t0)
            if name in f.get("victim_producers", []):
                victim_gaps.append(b - a)
                print("  %s (victim) gap %.2f s, committed at %+.2f; in flight at the fault: %s" % (
                    name, b - a, b - t0, ", ".join(at_fault) or "nothing"))
                for n in notes:
                    print("      " + n)
                continue
            # Any producer the fault should not touch: its Produce waits from the fault until
            # 5 s after the victim is back, and its longest gap between commits then.
            end = (back or t0) + 5
            _, worst, notes = producer_timeline(log_window(path, t0, end), t0)
            j = bisect.bisect_right(times, end)
            gap = max((y - x for x, y in zip(times[i - 1:j], times[i:j + 1])), default=b - a)
            other_waits.append(worst)
            if worst > args.min_wait:
                print("  %s (not a victim) longest gap %.2f s, a Produce waited %.2f s" % (name, gap, worst))
                if args.verbose:
                    for n in notes:
                        if " sent " not in n:
                            print("      " + n)
    s = sorted(victim_gaps)
    print("victims' gaps: n=%d p50=%s max=%s; other producers whose Produce waited over %.1f s: %d of %d" % (
        len(s), "%.2f" % percentile(s, 0.5) if s else "-", "%.2f" % s[-1] if s else "-", args.min_wait,
        sum(w > args.min_wait for w in other_waits), len(other_waits)))


# --- verify ----------------------------------------------------------------------------------


def verify(args):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    decided = {}
    for f in glob.glob(os.path.join(args.dir, "*.values")):
        with open(f) as fh:
            for line in fh:
                parts = line.split()
                for v in parts[1:]:
                    decided[v] = parts[0]
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "failover-verify-%d" % os.getpid(),
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    parts = sorted(c.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    hwm = {p: c.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)[1] for p in parts}
    c.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in parts])
    # read_committed ends at the last stable offset: an open transaction (a producer killed
    # mid-transaction) holds it back until the coordinator aborts it (transaction timeout).
    eof = {p: -1 for p in parts}
    seen = {}
    deadline = time.monotonic() + args.timeout
    while any(eof[p] < hwm[p] for p in parts) and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof[m.partition()] = m.offset()
            continue
        v = m.value().decode(errors="replace")
        seen[v] = seen.get(v, 0) + 1
    c.close()
    short = {p: (eof[p], hwm[p]) for p in parts if eof[p] < hwm[p]}
    acked = [v for v, k in decided.items() if k == "A"]
    lost = [v for v in acked if v not in seen]
    dup = [v for v in acked if seen.get(v, 0) > 1]
    aborted_visible = [v for v, k in decided.items() if k in ("X", "N") and v in seen]
    in_doubt_visible = [v for v, k in decided.items() if k == "D" and v in seen]
    mine = [v for v in seen if v.startswith(args.id_prefix + "-")]
    unknown = [v for v in mine if v not in decided]
    counts = {k: sum(1 for x in decided.values() if x == k) for k in "AXND"}
    res = {"scenario": "failover-verify", "lost": len(lost), "duplicated": len(dup),
           "aborted_visible": len(aborted_visible), "acked": counts["A"], "aborted": counts["X"],
           "given_up": counts["N"], "in_doubt": counts["D"], "in_doubt_visible": len(in_doubt_visible),
           "unknown_visible": len(unknown), "records_read": sum(seen.values()),
           "not_read_to_end": {str(p): v for p, v in short.items()},
           "examples": {"lost": lost[:5], "duplicated": dup[:5], "aborted_visible": aborted_visible[:5]}}
    print("lost=%d duplicated=%d aborted_visible=%d (acked %d values, aborted %d, given up %d, in doubt %d of "
          "which %d visible; %d records read%s)" % (
              len(lost), len(dup), len(aborted_visible), counts["A"], counts["X"], counts["N"], counts["D"],
              len(in_doubt_visible), sum(seen.values()),
              "" if not short else "; NOT read to the end: %s" % short), flush=True)
    if args.json_out:
        with open(args.json_out, "a") as fh:
            fh.write(json.dumps(res) + "\n")
    return 0 if not (lost or dup or aborted_visible or short) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    for name in ("produce", "produce-one"):
        p = sub.add_parser(name)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--dir", required=True, help="commit, value and log files")
        p.add_argument("--id-prefix", required=True, help="transactional.id = PREFIX-p<i>; values PREFIX-p<i>-<seq>-<r>")
        p.add_argument("--stop-file", required=True)
        p.add_argument("--max-seconds", type=float, default=3600)
        p.add_argument("--records", type=int, default=3, help="records per transaction (each to its own partition)")
        p.add_argument("--debug", default="", help="librdkafka's debug contexts (e.g. eos,broker,protocol)")
        p.add_argument("settings", nargs="*", help="extra librdkafka settings KEY=VALUE")
        if name == "produce":
            p.add_argument("--producers", type=int, default=8)
        else:
            p.add_argument("--index", type=int, required=True)

    p = sub.add_parser("owners")
    p.add_argument("--ask", required=True, help="daemons HOST:PORT,...")
    p.add_argument("--timeout", type=float, default=10)
    p.add_argument("ids", nargs="+")

    p = sub.add_parser("wait-commits")
    p.add_argument("--since", type=float, required=True, help="epoch seconds")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--producers", default="", help="names (p0,p1,...); default: every producer seen")
    p.add_argument("commits", nargs="+", help="commit files (globs)")

    p = sub.add_parser("report")
    p.add_argument("--faults", required=True)
    p.add_argument("--client", default="librdkafka")
    p.add_argument("--lease-ms", default="")
    p.add_argument("--extra", default="")
    p.add_argument("--json-out", default="")
    p.add_argument("--gaps-out", default="", help="every fault with each producer's gap (JSON lines)")
    p.add_argument("commits", nargs="+", help="commit files (globs)")

    p = sub.add_parser("timeline")
    p.add_argument("--dir", required=True, help="the scenario's data directory ($OUT/data/failover)")
    p.add_argument("--kind", default="stop-daemon", help="the faults to look at")
    p.add_argument("--min-wait", type=float, default=0.5,
                   help="list a producer that is not a victim if one of its Produce waited longer (s)")
    p.add_argument("-v", "--verbose", action="store_true", help="their requests too")

    p = sub.add_parser("verify")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--id-prefix", required=True)
    p.add_argument("--timeout", type=float, default=150)
    p.add_argument("--json-out", default="")

    args = ap.parse_args()
    if args.cmd == "produce":
        produce(args)
    elif args.cmd == "produce-one":
        produce_one(args)
    elif args.cmd == "owners":
        owners(args)
    elif args.cmd == "wait-commits":
        sys.exit(wait_commits(args))
    elif args.cmd == "report":
        report(args)
    elif args.cmd == "timeline":
        timeline(args)
    elif args.cmd == "verify":
        sys.exit(verify(args))


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: Apache-2.0
"""docs/scale.md's plots (PNG) and tables (markdown) from bench-fleet's figures (its --json)."""

import os

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def shapes_table(rows):
    out = ["| machine | CPU mode | PCI driver | slices | devices | bytes (JSON) |", "|---|---|---|---:|---:|---:|"]
    for r in rows:
        out.append("| %s | %s | %s | %d | %d | %d |"
                   % (r["machine"], r["mode"], "yes" if r["pci"] else "no", r["objects"], r["devices"], r["bytes"]))
    return "\n".join(out)


def shapes_plot(rows, path):
    machines = sorted({r["machine"] for r in rows}, key=lambda m: [r["bytes"] for r in rows if r["machine"] == m][0])
    fig, ax = plt.subplots(figsize=(9, 0.28 * len(machines) + 1.5))
    y = range(len(machines))
    for k, (mode, pci, colour) in enumerate((("numa", False, "tab:blue"), ("partitioned", False, "tab:orange"),
                                             ("numa", True, "tab:green"), ("partitioned", True, "tab:red"))):
        vals = [next((r["bytes"] / 1024 for r in rows if r["machine"] == m and r["mode"] == mode and r["pci"] == pci),
                     0) for m in machines]
        ax.barh([i + k * 0.2 - 0.3 for i in y], vals, height=0.2, color=colour,
                label="%s%s" % (mode, " + PCI" if pci else ""))
    ax.set_yticks(list(y))
    ax.set_yticklabels(machines, fontsize=7)
    ax.set_xlabel("ResourceSlice bytes per node (KiB, JSON)")
    ax.set_xscale("log")
    ax.legend(fontsize=7)
    ax.set_title("nrm's slices per node, by recorded machine")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def requests_plot(sizes, path, drivers=("cpu.nrm.io", "memory.nrm.io")):
    """Requests per node and driver (the most any node made for one driver) in each phase, at each fleet size."""
    phases = ("start", "storm", "rolling")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ns = sorted(sizes, key=int)
    for k, n in enumerate(ns):
        vals = [max(sizes[n].get(p, {}).get("counts", {}).get(d, (0, 0))[1] for d in drivers) for p in phases]
        ax.bar([i + k * 0.8 / len(ns) - 0.4 for i in range(len(phases))], vals, width=0.8 / len(ns),
               label="%s nodes" % n, align="edge")
    ax.set_xticks(range(len(phases)))
    ax.set_xticklabels(phases)
    ax.set_ylabel("requests a node and driver (max)")
    ax.axhline(3, color="grey", linestyle="--", linewidth=0.8)
    ax.text(len(phases) - 0.5, 3.1, "goal for the storm and the rolling update: 3", fontsize=7, ha="right")
    ax.legend(fontsize=8)
    ax.set_title("What each node's nrm asks of the API server, per driver")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def storage_plot(sizes, path, extrapolate_to=5000):
    """Slices' bytes and etcd's size against the fleet size, with a straight line to extrapolate_to."""
    ns = sorted(int(n) for n in sizes)
    sb = [sizes[str(n) if str(n) in sizes else n]["start"]["stored"]["slice_bytes"] / 2 ** 20 for n in ns]
    db = [sizes[str(n) if str(n) in sizes else n]["start"]["stored"]["db_bytes"] / 2 ** 20 for n in ns]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(ns, sb, "o-", label="ResourceSlices held (MiB, JSON)")
    ax.plot(ns, db, "s-", label="etcd database (MiB)")
    if len(ns) >= 2:
        for vals, style in ((sb, "C0--"), (db, "C1--")):
            slope = (vals[-1] - vals[0]) / (ns[-1] - ns[0])
            ax.plot([ns[-1], extrapolate_to], [vals[-1], vals[-1] + slope * (extrapolate_to - ns[-1])], style,
                    linewidth=0.8)
    ax.set_xlabel("nodes (dashed: extrapolated)")
    ax.legend(fontsize=8)
    ax.set_title("What a fleet of nrm nodes stores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sched_plot(sched, path):
    """pods/s and SLI p99 per case, one group of bars per fleet size, the runs' spread as error bars."""
    ns = sorted(sched, key=int)
    cases = [c for c in ("a", "a1", "b", "c", "d-individual", "d-grouped", "e")
             if any(c in sched[n]["summary"] for n in ns)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label, log in ((axes[0], "pods_per_s", "pods/s (create to bound)", False),
                                (axes[1], "sli_p99_s", "SLI p99 (s)", True)):
        w = 0.8 / len(ns)
        for k, n in enumerate(ns):
            summ = sched[n]["summary"]
            med = [((summ.get(c) or {}).get(key) or {}).get("median", 0) for c in cases]
            lo = [m - ((summ.get(c) or {}).get(key) or {}).get("min", m) for c, m in zip(cases, med)]
            hi = [((summ.get(c) or {}).get(key) or {}).get("max", m) - m for c, m in zip(cases, med)]
            ax.bar([i + k * w - 0.4 for i in range(len(cases))], med, width=w, yerr=[lo, hi], align="edge",
                   label="%s nodes" % n, capsize=2)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels(cases, fontsize=8, rotation=30, ha="right")
        ax.set_ylabel(label)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.suptitle("The real kube-scheduler with nrm's slices (b, c, e) and others' (a, a1, d)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def sched_table(sched):
    out = ["| nodes | pods | case | pods/s | SLI p50 (s) | SLI p99 (s) | scheduler CPU a pod (ms) | bound |",
           "|---:|---:|---|---:|---:|---:|---:|---|"]
    for n in sorted(sched, key=int):
        s = sched[n]
        for c, summ in s["summary"].items():
            def med(k):
                return "%.3g" % summ[k]["median"] if summ.get(k) else "-"
            out.append("| %s | %d | %s | %s | %s | %s | %s | %s |" % (
                n, int(n) * s["pods_per_node"], c, med("pods_per_s"), med("sli_p50_s"), med("sli_p99_s"),
                med("sched_cpu_ms_per_pod"),
                "/".join(str(b) for b in s.get("bound", {}).get(c, []))))
    return "\n".join(out)


def write(figures, outdir):
    """Every plot and table bench-fleet can draw from figures, into outdir; returns the files written."""
    os.makedirs(outdir, exist_ok=True)
    done = []
    if figures.get("shapes"):
        shapes_plot(figures["shapes"], os.path.join(outdir, "slices-per-node.png"))
        with open(os.path.join(outdir, "slices-per-node.md"), "w") as fh:
            fh.write(shapes_table(figures["shapes"]) + "\n")
        done += ["slices-per-node.png", "slices-per-node.md"]
    sizes = figures.get("sizes") or {}
    if sizes:
        requests_plot(sizes, os.path.join(outdir, "requests-per-node.png"))
        storage_plot(sizes, os.path.join(outdir, "storage.png"))
        done += ["requests-per-node.png", "storage.png"]
    if figures.get("sched"):
        sched_plot(figures["sched"], os.path.join(outdir, "scheduler.png"))
        with open(os.path.join(outdir, "scheduler.md"), "w") as fh:
            fh.write(sched_table(figures["sched"]) + "\n")
        done += ["scheduler.png", "scheduler.md"]
    return done

"""Short tables for people, from the JSON-ready summaries of obscura_jax.observe.summary.summarize."""
from __future__ import annotations

from models.registry import format_units
from schedules.sizes import format_bytes, format_seconds
from schedules.formats.text import pipeline_shape
from schedules.timeline import BUBBLE_DEFINITION

fmt_time = format_seconds     # '1.426 s', '83.8 ms', '22 us'
CPU_NOTE = ("times measured on emulated CPU devices are illustrative: the devices share the host's cores "
            "and caches, so the order of schedules may differ from the simulator's, which prices each device "
            "running alone")


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1%}"


def timing_lines(res: dict) -> list[str]:
    """Min/median/max step time (the median step is the one charted), the bubble
    fractions, and the note when emulated devices outnumber cores."""
    out, st = [], res.get("step_time")
    if st:
        n = st["timed_steps"]
        chart = (f"; the chart and trace show step {res['timeline_step']}, the median"
                 if res.get("timeline_step") is not None else "")
        out.append(f"step time over {n} timed step{'s' if n > 1 else ''}: "
                   f"min {fmt_time(st['min'])}, median {fmt_time(st['median'])}, max {fmt_time(st['max'])}"
                   f"{chart}")
    if res.get("bubble_fraction") is not None or res.get("simulated_bubble_fraction") is not None:
        out.append(f"bubble = {BUBBLE_DEFINITION}: measured {_pct(res.get('bubble_fraction'))}, "
                   f"simulated {_pct(res.get('simulated_bubble_fraction'))}; recompute (busy, not useful work; "
                   f"same denominator): measured {_pct(res.get('recompute_fraction'))}, "
                   f"simulated {_pct(res.get('simulated_recompute_fraction'))}")
    if res.get("cpu_note"):
        out.append(f"note: {res['cpu_note']}")
    if on_cpu(res):
        out.append(f"note: {CPU_NOTE}")
    return out


def on_cpu(res: dict) -> bool:
    """Whether the run's devices are (emulated) CPU devices: 'cpu:0', 'p1:cpu:0'."""
    return any(str(d).split(":")[-2:-1] == ["cpu"] for d in res.get("devices") or ())


def header(res: dict) -> str:
    """'obscura: llama2-tiny, 4 devices, 16 model stages (4 per device), m=8 micro-batches
    (b=4, T=64), data stdlib, on cpu:0, ...'."""
    rows = res.get("pipeline_devices") or [{"stages": [s]} for s in range(res["num_stages"])]
    return (f"{res['schedule']}: {res['model']}, {pipeline_shape([len(d['stages']) for d in rows])}, "
            f"m={res['num_microbatches']} micro-batches (b={res['micro_batch_size']}, T={res['seq_len']}), "
            f"data {res['data']}, on {', '.join(sorted(set(res['devices'])))}")


def train_report(res: dict) -> str:
    losses = res["losses"]
    out = [header(res)]
    lay = res.get("layout") or {}
    if lay.get("data", 1) * lay.get("tensor", 1) > 1:
        out.append(f"layout: every stage on {lay['data']} data x {lay['tensor']} tensor devices "
                   f"({lay['devices']} devices); per-stage bytes below are per device")
    if res.get("placement_note"):
        out.append(f"note: {res['placement_note']}")
    if res.get("plan_note"):
        out.append(f"plan: {res['plan_note']}")
    if losses:
        earlier = sum(res.get("before_resume") or ())
        out.append(f"loss: step {res['steps'][0]} {losses[0]:.4f} -> step {res['steps'][-1]} {losses[-1]:.4f}"
                   + (f" (steps {res['steps'][0]}-{res['steps'][earlier - 1]} before the resume, from the "
                      "checkpoint's metrics log)" if earlier else ""))
    rows = [["iteration time", fmt_time(res["iteration_time"]), fmt_time(res["simulated_iteration_time"]),
             _ratio(res["iteration_time"], res["simulated_iteration_time"])]]
    if res.get("simulated_serial_time"):
        rows.append(["(one shared device)", "", fmt_time(res["simulated_serial_time"]),
                     _ratio(res["iteration_time"], res["simulated_serial_time"])])
    out.append(table(["", "measured", "simulated", "meas/sim"], rows))
    out += timing_lines(res)
    tps = res.get("tokens_per_second")
    d = res["dispatch_us"]
    out.append(f"tokens/s {tps:,.0f}" if tps else "tokens/s -")
    out.append("host dispatch per action (mean): " + "  ".join(
        f"{k} {d[k]:.0f} us" for k in ("F", "B", "SO", "SI", "all") if d.get(k) is not None)
        + (f"; median {d['all_median']:.0f} us, p10 {d['all_p10']:.0f} us" if d.get("all_median") else ""))
    sw = res.get("swap") or {}
    if sw.get("bytes_out"):
        gb = lambda v: f"{v:.2f} GB/s" if v else "-"
        out.append(f"swap: {format_bytes(sw['bytes_out'])} out / {format_bytes(sw['bytes_in'])} in over the run; "
                   f"in-run {gb(sw.get('measured_gbps_out'))} out, {gb(sw.get('measured_gbps_in'))} in; "
                   f"standalone {gb(sw.get('standalone_gbps_out'))} out, {gb(sw.get('standalone_gbps_in'))} in"
                   + (f"; {sw['overlap_with_compute']:.0%} of swap time overlapped compute"
                      if sw.get("overlap_with_compute") is not None else ""))
    out += stage_tables(res)
    out += offload_lines(res)
    if any(st["peak_source"] != "memory_stats" for st in res["stages"]):
        out.append("* peak = params + grads + optimizer state + live activations counted in issue order "
                   "+ XLA scratch (no memory_stats for this stage alone)")
    if all("planned_peak_bytes" in st for st in res["stages"]):
        under = [str(s) for s, st in enumerate(res["stages"]) if st["planned_vs_measured_bytes"] < 0]
        out.append("plan: predicted vs measured peak (weights + live activations + XLA scratch): "
                   + ", ".join(f"{format_bytes(st['planned_peak_bytes'])} / "
                               f"{format_bytes(st['planned_peak_bytes'] - st['planned_vs_measured_bytes'])}"
                               for st in res["stages"])
                   + ("; never under-predicted" if not under
                      else f"; UNDER-predicted on stage(s) {', '.join(under)}"))
    shared_peaks = {}
    for st in res["stages"]:
        if st["peak_source"] != "memory_stats" and st.get("device_peak_bytes"):
            shared_peaks[st["device"]] = st["device_peak_bytes"]
    for dev, peak in shared_peaks.items():
        out.append(f"memory_stats peak of shared device {dev}: {format_bytes(peak)}")
    out += memory_lines(res.get("memory"))
    return "\n".join(out)


def memory_lines(memory: dict | None) -> list[str]:
    """Per device: the memory check's estimate (its peak phase and largest terms)
    beside the allocator's limit and the measured peak, where they are known."""
    out = []
    for d in (memory or {}).get("devices", ()):
        terms = sorted(((k, v) for k, v in d["terms"].items() if k != "allocator"), key=lambda kv: -kv[1])
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in terms[:3])
        limit = f" of {format_bytes(d['limit_bytes'])} ({d['limit_source']})" if d["limit_bytes"] else ""
        peak = (f"; measured peak {format_bytes(d['measured_peak_bytes'])} (predicted / measured "
                f"{d['predicted_over_measured']:.3f})" if d.get("measured_peak_bytes") else "")
        out.append(f"memory {d['device']}: predicted {format_bytes(d['predicted_bytes'])}{limit} at its "
                   f"{d['phase']} ({parts}){peak}")
    return out


def stage_tables(res: dict) -> list[str]:
    """One row per model stage; when a pipeline device runs several model stages
    (interleaved, zb-v, ...), a `dev` column and one row per pipeline device too
    (the idle figures are the device's); with several processes, `proc` and `device`
    columns (the process that ran the stage, its device as p<process>:<local id>)."""
    chunked = any(len(d["stages"]) > 1 for d in res.get("pipeline_devices") or ())
    several = res.get("processes", 1) > 1
    hosted = any(st.get("residual_host_bytes_per_microbatch") for st in res["stages"])
    rows = []
    for s, st in enumerate(res["stages"]):
        m = st.get("measured") or {}
        rows.append([str(s)] + ([str(st["process"]), str(st["device"])] if several else [])
                    + ([str(st["pipeline_device"])] if chunked else [])
                    + [format_units(st["units"]), st["policy"]["name"],
                       "yes" if st["adjusted"] else "no", format_bytes(st["residual_bytes_per_microbatch"])]
                    + ([format_bytes(st["residual_host_bytes_per_microbatch"])] if hosted else [])
                    + [format_bytes(st["peak_bytes"]) + ("" if st["peak_source"] == "memory_stats" else "*"),
                       format_bytes(st.get("simulated_peak_bytes")),
                       fmt_time(m.get("compute")), fmt_time(m.get("backward_bubble"))])
    out = [table(["stage"] + (["proc", "device"] if several else []) + (["dev"] if chunked else [])
                 + ["units", "policy", "adj", "resid/mb"] + (["host/mb"] if hosted else [])
                 + ["peak", "sim peak", "busy", "bwd bubble"], rows)]
    if chunked:
        rows = []
        for d in res["pipeline_devices"]:
            m = d.get("measured") or {}
            rows.append([str(d["device"]), ",".join(str(s) for s in d["stages"]),
                         format_bytes(d.get("simulated_peak_bytes")), fmt_time(m.get("compute")),
                         fmt_time(m.get("backward_bubble"))])
        out.append(table(["dev", "model stages", "sim peak", "busy", "bwd bubble"], rows))
    return out


def offload_lines(res: dict) -> list[str]:
    """What the run keeps in host memory: residual bytes per micro-batch on device and
    on host, what moves per iteration, the host peak; nothing without offloading."""
    off = res.get("offload") or {}
    if not off.get("memory_kinds"):
        return []
    stages = res["stages"]
    out = [f"offload: {', '.join(off['ops'])} kept in {'/'.join(off['memory_kinds'])} memory; residuals per "
           "micro-batch on device / on host: " + ", ".join(
               f"{format_bytes(st['residual_bytes_per_microbatch'])} / "
               f"{format_bytes(st['residual_host_bytes_per_microbatch'])}" for st in stages),
           f"offload traffic per iteration: {format_bytes(off['to_host_bytes_per_iteration'])} to host, "
           f"{format_bytes(off['from_host_bytes_per_iteration'])} back; host peak {format_bytes(off['peak_host_bytes'])} "
           "(stages summed); device peaks count no host bytes"]
    if off.get("note"):
        out.append(f"note: {off['note']}")
    return out


def compare_report(results: list[dict]) -> str:
    rows = []
    for r in results:
        peaks = [st["peak_bytes"] for st in r["stages"]]
        rows.append([r["label"], fmt_time(r["iteration_time"]), fmt_time(r["simulated_iteration_time"]),
                     _ratio(r["iteration_time"], r["simulated_iteration_time"]),
                     f"{r['tokens_per_second']:,.0f}" if r.get("tokens_per_second") else "-",
                     _pct(r.get("bubble_fraction")),
                     f"{r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}" if r["losses"] else "-",
                     " / ".join(format_bytes(p) for p in peaks)])
    head = ["schedule", "iteration", "simulated", "meas/sim", "tokens/s", "bubble", "loss", "peak per stage"]
    if any("check" in r for r in results):     # compare --check: each run against the unpipelined model
        head.append("check")
        for row, r in zip(rows, results):
            row.append("-" if "check" not in r else "equal" if r["check"]["equal"] else "DIFFERENT")
    out = [table(head, rows),
           f"bubble = {BUBBLE_DEFINITION}, measured in the charted step"]
    cpu = any(on_cpu(r) for r in results)
    if cpu:
        out.append(f"note: {CPU_NOTE}")
    out += [f"note: {line}" + ("; CPU timings are illustrative" if cpu else "") for line in order_conflicts(results)]
    return "\n".join(out)


def order_conflicts(results: list[dict]) -> list[str]:
    """One line per pair of runs whose measured order contradicts their simulated order."""
    out = []
    timed = [r for r in results if r.get("iteration_time") and r.get("simulated_iteration_time")]
    name = lambda r: r.get("label", r["schedule"])  # noqa: E731
    for i, a in enumerate(timed):
        for b in timed[i + 1:]:
            measured = a["iteration_time"] - b["iteration_time"]
            simulated = a["simulated_iteration_time"] - b["simulated_iteration_time"]
            if measured * simulated < 0:
                fast, slow = (a, b) if measured < 0 else (b, a)
                out.append(f"{name(fast)} measured faster than {name(slow)} ({fmt_time(fast['iteration_time'])} vs "
                           f"{fmt_time(slow['iteration_time'])}) but simulated slower "
                           f"({fmt_time(fast['simulated_iteration_time'])} vs "
                           f"{fmt_time(slow['simulated_iteration_time'])}): the measured order contradicts the "
                           "simulator's")
    return out

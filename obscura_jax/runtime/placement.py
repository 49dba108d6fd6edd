"""Which device runs which stage. Never assumes a device count: with fewer devices
than stages, stages map round-robin (and the placement says so); with one GPU all
stages share it. With data and tensor parallelism each pipeline device is a group
of D x T devices, a stage mesh (obscura_jax.runtime.stage_mesh): the placement asks for
exactly pipeline devices x D x T devices and cuts them into consecutive groups."""
from __future__ import annotations

from dataclasses import dataclass

import jax
from models.errors import ObscuraError
from obscura_jax.errors import RunError, UsageError
from obscura_jax.runtime.stage_mesh import StageMesh, single
from schedules.sizes import parse_int


@dataclass(frozen=True)
class Placement:
    devices: tuple            # one jax.Device per stage (its mesh's lead device)
    platform: str
    note: str                 # one line for people, empty when one device per stage
    meshes: tuple = ()        # StageMesh per stage (empty: each stage on its one device)
    offered: int = 0          # devices the run was given (--devices), when known

    def mesh(self, stage: int) -> StageMesh:
        return self.meshes[stage] if self.meshes else single(self.devices[stage])

    @property
    def spans_processes(self) -> bool:
        """A stage mesh with devices in several processes (its data axis across them)."""
        return any(len({d.process_index for d in m.devices}) > 1 for m in self.meshes)

    @property
    def layout(self) -> tuple[int, int]:
        """(data, tensor) of every stage's mesh."""
        m = self.mesh(0)
        return m.data, m.tensor

    @property
    def num_stages(self) -> int:
        return len(self.devices)

    @property
    def shared(self) -> bool:
        return len({d.id for d in self.devices}) < len(self.devices)

    def describe(self) -> list[str]:
        if self.meshes:
            return [f"stage {s} -> {self.mesh(s).describe()}" for s in range(self.num_stages)]
        return [f"stage {s} -> {d.platform}:{d.id}" for s, d in enumerate(self.devices)]


def _available(platform: str) -> list:
    try:
        return list(jax.devices(platform))
    except RuntimeError:
        return []


def parse_stage_devices(text: str, num_stages: int) -> tuple[int, ...]:
    try:
        ids = tuple(parse_int(t) for t in text.split(","))
    except ObscuraError:
        raise UsageError(f"--stage-devices must be comma-separated device indices, got {text!r}") from None
    if len(ids) != num_stages:
        raise UsageError(f"--stage-devices lists {len(ids)} devices for {num_stages} stages")
    return ids


def place_stages(num_stages: int, platform: str, count: int,
                 stage_devices: tuple[int, ...] | None = None) -> Placement:
    """platform/count as returned by obscura_jax.devices.parse_devices."""
    if num_stages < 1:
        raise ValueError(f"number of stages must be >= 1, got {num_stages}")
    if platform == "auto":
        gpus = _available("gpu")
        platform, pool = ("gpu", gpus) if gpus else ("cpu", _available("cpu"))
    elif platform == "gpu":
        pool = _available("gpu")
        if not pool:
            raise RunError("--devices gpu: no GPU is visible to JAX")
    elif platform == "cpu":
        pool = _available("cpu")
        if count > len(pool):
            raise UsageError(f"--devices cpu:{count}: JAX has only {len(pool)} CPU devices "
                             "(the count is fixed when JAX starts)")
        pool = pool[:count]
    else:
        raise ValueError(f"unknown platform {platform!r}")
    if not pool:
        raise RunError(f"no {platform} devices available to host {num_stages} stages")

    if stage_devices is not None:
        if len(stage_devices) != num_stages:
            raise ValueError(f"{len(stage_devices)} stage devices given for {num_stages} stages")
        bad = [i for i in stage_devices if not 0 <= i < len(pool)]
        if bad:
            raise UsageError(f"stage device {bad[0]} does not exist ({len(pool)} {platform} devices: "
                             f"0..{len(pool) - 1})")
        devices = tuple(pool[i] for i in stage_devices)
    else:
        devices = tuple(pool[s % len(pool)] for s in range(num_stages))

    note = ""
    distinct = len({d.id for d in devices})
    if distinct == 1 and num_stages > 1:
        note = f"all {num_stages} stages share one {platform} device ({devices[0]})"
    elif distinct < num_stages:
        note = f"{num_stages} stages on {distinct} {platform} devices (round-robin: stages share devices)"
    return Placement(devices, platform, note, offered=count if platform == "cpu" else 0)


def place_across_processes(num_stages: int, platform: str,
                           stage_devices: tuple[int, ...] | None = None) -> Placement:
    """Stages on every process's devices (jax.devices(), ordered by process): in
    contiguous blocks, so each process runs neighbouring stages and only the blocks'
    edges cross processes; or on `stage_devices` (indices into that list)."""
    if platform == "auto":
        platform = "gpu" if _available("gpu") else "cpu"
    pool = _available(platform)
    if not pool:
        raise RunError(f"no {platform} devices available to host {num_stages} stages")
    if stage_devices is not None:
        bad = [i for i in stage_devices if not 0 <= i < len(pool)]
        if bad:
            raise UsageError(f"stage device {bad[0]} does not exist ({len(pool)} {platform} devices over all "
                             f"processes: 0..{len(pool) - 1})")
        devices = tuple(pool[i] for i in stage_devices)
    else:
        if num_stages < len(pool):
            raise UsageError(f"{num_stages} stages cannot keep {len(pool)} devices busy (every process's "
                             "devices run stages): use fewer processes or devices per process, or more stages")
        devices = tuple(pool[s * len(pool) // num_stages] for s in range(num_stages))
    idle = sorted({d.process_index for d in pool} - {d.process_index for d in devices})
    if idle:
        raise UsageError(f"process {idle[0]} would run no stage (--stage-devices): every process must run one")
    note = ""
    if len({d.id for d in devices}) < num_stages:
        note = f"{num_stages} stages on {len({d.id for d in devices})} {platform} devices (contiguous blocks)"
    return Placement(devices, platform, note, offered=len(pool))


def place_schedule(placement_fn, schedule, data: int = 1, tensor: int = 1,
                   data_across_processes: bool = False) -> Placement:
    """Devices for `schedule`'s stages: `placement_fn(n)` places n stages one per
    device; a schedule with several stages (chunks) per device asks it for one per
    schedule device and puts each stage on its device (`schedule.stage_to_device`:
    interleaved loops, zb-v's V). With data x tensor > 1 each schedule device is a
    stage mesh of the next data x tensor devices, or (`data_across_processes`) of
    data rows taken from every process in turn."""
    if data * tensor > 1:
        return _place_meshes(placement_fn, schedule, data, tensor, data_across_processes)
    if schedule.one_stage_per_device:
        return placement_fn(schedule.num_stages)
    base = placement_fn(schedule.num_devices)
    devices = tuple(base.devices[d] for d in schedule.stage_to_device)
    distinct = len({d.id for d in devices})
    note = base.note or (f"{schedule.num_stages} stages on {distinct} {base.platform} devices "
                         f"({schedule.num_stages // schedule.num_devices} chunks per device)")
    return Placement(devices, base.platform, note)


def _place_meshes(placement_fn, schedule, data: int, tensor: int, across: bool) -> Placement:
    width, n = data * tensor, schedule.num_devices
    base = placement_fn(n * width)
    flat = base.devices
    given = base.offered or len({d.id for d in flat})
    if given != n * width or len({d.id for d in flat}) != n * width:
        raise UsageError(f"{n} pipeline devices x {data} data x {tensor} tensor = {n * width} devices, "
                         f"but the run has {given} (--devices): they must be equal")
    groups = [StageMesh(tuple(flat[g * width:(g + 1) * width]), data, tensor) for g in range(n)]
    if across:
        groups = _data_across_processes(flat, n, data, tensor)
        if not any(len({d.process_index for d in g.devices}) > 1 for g in groups):
            raise UsageError("--data-across-processes needs several processes")
    elif any(len({d.process_index for d in g.devices}) > 1 for g in groups):
        raise UsageError(f"a {data} x {tensor} stage mesh would span processes: give each process a multiple "
                         "of data x tensor devices, or split the data axis over them (--data-across-processes)")
    where = tuple(schedule.stage_to_device) or tuple(range(schedule.num_stages))
    meshes = tuple(groups[d] for d in where)
    note = f"{schedule.num_stages} stages on {n} meshes of {data} data x {tensor} tensor {base.platform} devices"
    return Placement(tuple(m.lead for m in meshes), base.platform, note, meshes)


def _data_across_processes(flat, n: int, data: int, tensor: int) -> list[StageMesh]:
    """Stage meshes whose data axis spans the processes: with N processes of K devices
    and D = N x D', process q holds data rows q D' .. (q+1) D' - 1 of EVERY pipeline
    device (each row's T tensor devices together), so a micro-batch's shard d stays in
    one process from the first stage to the last and only the loss average and the
    once-per-step gradient all-reduce cross processes."""
    by_process: dict[int, list] = {}
    for d in flat:
        by_process.setdefault(d.process_index, []).append(d)
    procs = sorted(by_process)
    k = len(by_process[procs[0]])
    if data % len(procs) or any(len(v) != k for v in by_process.values()) or k != n * (data // len(procs)) * tensor:
        raise UsageError(f"{n} pipeline devices of {data} data x {tensor} tensor devices do not split over "
                         f"{len(procs)} processes of {k} devices: each process must hold whole stage meshes, or "
                         "data / processes data rows of every stage")
    rows = data // len(procs)
    meshes = []
    for g in range(n):
        devices = []
        for d in range(data):
            local = by_process[procs[d // rows]]
            start = (g * rows + d % rows) * tensor
            devices += local[start:start + tensor]
        meshes.append(StageMesh(tuple(devices), data, tensor))
    return meshes

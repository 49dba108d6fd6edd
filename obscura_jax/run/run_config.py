"""RunConfig: everything one training run needs, validated once; and turning it into
a model config, a Schedule and a partition (from a generator, a schedule file, a
Schedule object or a plan file)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import models
import schedules
from obscura_jax.run import plan_run
from models.errors import ObscuraError
from models.registry import LAYER
from obscura_jax.errors import UsageError
from obscura_jax.runtime.weight_grad import HEAD_WEIGHT_GRAD, WEIGHT_GRAD_MODES, WeightGrad
from schedules.generators import check_pipeline_size
from schedules.generators.join import FIRST_WEIGHT_GRAD, first_weight_grad
from schedules.sizes import parse_int, split_items

MAX_SEED = 2 ** 63 - 1      # JAX's key takes a 64-bit signed seed; numpy's generators a non-negative one
from schedules.formats.io import load_schedule
from schedules.ir import Schedule, check_recompute_names
from schedules.sizes import parse_bytes
from schedules.validator import validate

SWAP_MECHANISMS = ("device_put", "jit")
DEFAULT_STAGES, DEFAULT_MICROBATCHES = 4, 8     # a run given neither, nor a schedule file or plan
MAX_RUN_MICROBATCHES = 4096    # per step: each is dispatched op by op on every stage


def default_warmup_steps(steps: int) -> int:
    """Warm-up steps when none are given: 1, or 0 for a one-step run (its one step is timed)."""
    return 1 if steps > 1 else 0


def parse_adjusted(text):
    """--adjusted K | all | 0,1,2 -> None | int | 'all' | tuple[int, ...]."""
    if text is None or isinstance(text, (int, tuple)):
        return text
    text = str(text).strip()
    if text == "all":
        return "all"
    try:
        vals = tuple(parse_int(t) for t in split_items(text, "--adjusted"))
    except ObscuraError:
        raise UsageError(f"--adjusted must be K, all or a comma list of stages, got {text!r}") from None
    return vals[0] if len(vals) == 1 else vals


def parse_partition(value) -> tuple[int, ...]:
    """--partition N,N,... (units per model stage) -> a tuple of counts, each >= 1."""
    try:
        items = split_items(value, "--partition") if isinstance(value, str) else list(value)
        counts = tuple(parse_int(v) for v in items)
    except (ObscuraError, TypeError):
        raise UsageError(f"--partition must be a comma list of unit counts per stage, got {value!r}") from None
    if not counts or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts):
        raise UsageError(f"--partition must be a comma list of unit counts >= 1 per stage, got {value!r}")
    return counts


def policy_names(policy) -> tuple[str, ...]:
    """RunConfig.adjusted_policy as the schedule's recompute names: a tuple of op and
    preset names as given, or a models.RecomputePolicy's recompute set (`layer` for a
    layer-granular one). It may not offload: adjusted stages offload the run's set."""
    if not isinstance(policy, models.RecomputePolicy):
        return tuple(t.strip() for t in policy.split(",") if t.strip()) if isinstance(policy, str) else tuple(policy)
    if policy.offload:
        raise UsageError(f"adjusted_policy {policy.name!r} offloads: adjusted stages offload what "
                         "RunConfig.offload (--offload) and the base policy offload, less what they recompute")
    return (LAYER,) if policy.layer else tuple(sorted(policy.recompute))


@dataclass(frozen=True)
class RunConfig:
    model: str = "llama2-tiny"
    stages: int | None = None          # None: from the schedule file / plan, else DEFAULT_STAGES
    microbatches: int | None = None    # None: from the schedule file / plan, else DEFAULT_MICROBATCHES
    schedule: object = "1f1b"          # generator name, schedule JSON path, or a Schedule
    adjusted: object = None            # None | K | "all" | tuple of stages
    adjusted_policy: tuple[str, ...] = ("full",)
    policy: object = "none"            # base policy of non-adjusted stages: a name, op list or RecomputePolicy
    offload: object = ()               # ops every stage keeps in host memory (op/preset names; "a,b" or a tuple)
    swap_blocks: int = 0
    swap_fraction: float = 0.0
    virtual_stages: int | None = None  # interleaved: model chunks per device (None: the generator's 2)
    steps: int = 3
    seed: int = 0
    micro_batch_size: int = 2
    seq_len: int = 64
    data: str = "synthetic"
    data_dtype: str | None = None
    plan: str | None = None
    plan_scale_down: bool = False      # run a plan made for another model (obscura_jax.run.plan_run)
    checkpoint_dir: str | None = None
    resume: bool = False
    checkpoint_every: int = 0          # 0: only at the end
    optimizer: str = "adamw"
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int | None = None    # None: 1 (0 for a one-step run); must leave a timed step
    swap_mechanism: str = "device_put"
    swap_enabled: bool = True
    record_timeline: bool = True
    measure_costs: bool = True
    cost_reps: int = 3
    model_overrides: tuple = field(default=())  # ((field, value), ...)
    data_parallel: int = 1             # each stage on a data x tensor mesh (obscura_jax.runtime.stage_mesh)
    tensor_parallel: int = 1
    data_across_processes: bool = False  # several processes: each holds data rows of every stage
    device_memory: float | str | None = None  # bytes each device's allocator holds (e.g. "24GiB"); None: asked
    force_memory: bool = False         # run even where the memory check says a device cannot hold it
    partition: object = None           # units per model stage, in stage order ("5,4,..." or a tuple); None: even
    weight_grad: str | None = None     # a split backward's W: hold its inputs or rederive them (None: a plan's, else hold)
    head_weight_grad: str = "auto"     # the head's W: auto | defer | at-once (obscura_jax.runtime.weight_grad)
    first_weight_grad: str = "split"   # stage 0's W: split | at-once (its backward whole: schedules.generators.join)

    def __post_init__(self) -> None:
        """Long: every field checked in turn, each with its own one-line error."""
        if isinstance(self.schedule, os.PathLike):
            object.__setattr__(self, "schedule", os.fspath(self.schedule))
        if not isinstance(self.schedule, (str, Schedule)):
            raise UsageError(f"RunConfig.schedule must be a generator name, a schedule JSON path or a "
                             f"Schedule, got {type(self.schedule).__name__}")
        if isinstance(self.schedule, str) and not self.schedule.strip():
            raise UsageError("--schedule is empty: give a generator name or a schedule JSON file")
        object.__setattr__(self, "adjusted", parse_adjusted(self.adjusted))
        object.__setattr__(self, "adjusted_policy", policy_names(self.adjusted_policy))
        for name in ("steps", "micro_batch_size", "seq_len", "cost_reps", "data_parallel", "tensor_parallel"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("stages", "microbatches"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise UsageError(f"--{name} must be >= 1, got {v}")
        if self.virtual_stages is not None and self.virtual_stages < 1:
            raise UsageError(f"--virtual-stages must be >= 1, got {self.virtual_stages}")
        if self.virtual_stages is not None:     # the model stages it makes, before any is built
            try:
                check_pipeline_size((self.stages or DEFAULT_STAGES) * self.virtual_stages, self.microbatches)
            except ObscuraError as e:
                raise UsageError(f"--virtual-stages {self.virtual_stages} on {self.stages or DEFAULT_STAGES} stages: "
                                 f"{e}") from None
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise UsageError(f"--seed must be an integer in 0..{MAX_SEED} (2**63 - 1), got {self.seed}")
        if self.swap_blocks < 0:
            raise UsageError(f"--swap-blocks must be >= 0, got {self.swap_blocks}")
        if not (0.0 <= self.swap_fraction <= 1.0) or math.isnan(self.swap_fraction):
            raise UsageError(f"--swap-fraction must be in [0, 1], got {self.swap_fraction}")
        if self.warmup_steps is None:
            object.__setattr__(self, "warmup_steps", default_warmup_steps(self.steps))
        if self.warmup_steps < 0 or self.checkpoint_every < 0:
            raise UsageError("--warmup-steps and --checkpoint-every must be >= 0")
        if self.warmup_steps >= self.steps:
            raise UsageError(f"--warmup-steps {self.warmup_steps} leaves no timed step of --steps {self.steps}: "
                             "warm-up steps must be fewer than the steps")
        if self.swap_mechanism not in SWAP_MECHANISMS:
            raise UsageError(f"--swap-mechanism must be one of {', '.join(SWAP_MECHANISMS)}")
        if self.resume and not self.checkpoint_dir:
            raise UsageError("--resume needs --checkpoint-dir")
        if self.learning_rate <= 0 or not math.isfinite(self.learning_rate):
            raise UsageError(f"--lr must be > 0, got {self.learning_rate}")
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise UsageError(f"--weight-decay must be finite and >= 0, got {self.weight_decay}")
        if self.microbatches is not None and self.microbatches > MAX_RUN_MICROBATCHES:
            raise UsageError(f"--microbatches must be <= {MAX_RUN_MICROBATCHES}, got {self.microbatches} (every "
                             "micro-batch is dispatched op by op on every stage: more per step does not run in "
                             "reasonable time)")
        if self.micro_batch_size % self.data_parallel:
            raise UsageError(f"--micro-batch-size {self.micro_batch_size} is not divisible by --data-parallel "
                             f"{self.data_parallel} (each micro-batch splits over the data axis)")
        if self.weight_grad is not None and self.weight_grad not in WEIGHT_GRAD_MODES:
            raise UsageError(f"--weight-grad must be one of {', '.join(WEIGHT_GRAD_MODES)}, got {self.weight_grad!r}")
        if self.head_weight_grad not in HEAD_WEIGHT_GRAD:
            raise UsageError(f"--head-weight-grad must be one of {', '.join(HEAD_WEIGHT_GRAD)}, "
                             f"got {self.head_weight_grad!r}")
        if self.first_weight_grad not in FIRST_WEIGHT_GRAD:
            raise UsageError(f"--first-weight-grad must be one of {', '.join(FIRST_WEIGHT_GRAD)}, "
                             f"got {self.first_weight_grad!r}")
        check_pipeline_size(self.stages, self.microbatches)
        if self.partition is not None:
            object.__setattr__(self, "partition", parse_partition(self.partition))
        if self.device_memory is not None:
            object.__setattr__(self, "device_memory", parse_bytes(self.device_memory, "--device-memory",
                                                                  error=UsageError))
        check_recompute_names(split_items(",".join(self.adjusted_policy), "--adjusted-policy", UsageError))
        if isinstance(self.policy, str):
            check_recompute_names(split_items(self.policy, "--policy", UsageError))
        elif not isinstance(self.policy, models.RecomputePolicy):
            raise UsageError(f"RunConfig.policy must be a preset name, comma-separated op names or a "
                             f"models.RecomputePolicy, got {type(self.policy).__name__}")
        try:
            object.__setattr__(self, "offload", tuple(models.offload_names(self.offload)))
        except ObscuraError as e:
            raise UsageError(f"--offload: {e}") from None
        if self.model in models.CONFIGS:     # a model not registered is refused when the run starts
            self.base_policy(models.CONFIGS[self.model])

    def base_policy(self, cfg=None):
        """The RecomputePolicy of the stages the schedule does not adjust: `policy` with
        `offload` added (one line, UsageError, for an unknown op or one both recomputed
        and offloaded). Adjusted stages offload the same ops, less those they recompute
        (obscura_jax.runtime.pipeline.stage_policies)."""
        family = (cfg or self.model_config()).family
        try:
            return models.resolve_policy(self.policy, family, offload=self.offload)
        except ObscuraError as e:
            raise UsageError(f"--policy / --offload: {e}") from None

    def model_config(self):
        return models.get_config(self.model, **dict(self.model_overrides))

    @property
    def weight_grad_options(self) -> WeightGrad:
        """The W the run uses: --weight-grad, else what its plan was made for, else hold."""
        mode = self.weight_grad
        if mode is None and self.plan:
            from planner.plan import load_plan  # lazy: the planner loads JAX
            mode = load_plan(self.plan).weight_grad
        return WeightGrad(mode or "hold", self.head_weight_grad)

    @property
    def layout(self) -> tuple[int, int]:
        """(data, tensor) parallelism inside every stage."""
        return self.data_parallel, self.tensor_parallel

    def check_layout(self, cfg) -> None:
        """One line (UsageError) when the model cannot shard over --tensor-parallel, or
        asks for cuDNN attention (a sweep row's, `--layout`) off a GPU."""
        if cfg.attention_impl == "cudnn":
            import jax  # lazy: JAX has started by now (the trainer calls this)
            if jax.default_backend() != "gpu":
                raise UsageError(f"{cfg.name} runs cuDNN attention, which needs a GPU (this run's backend is "
                                 f"{jax.default_backend()}); a sweep row's xla attention runs anywhere")
        if self.tensor_parallel > 1:
            from models.tensor_parallel import check_tensor_parallel  # lazy: loads JAX
            try:
                check_tensor_parallel(cfg, self.tensor_parallel)
            except ObscuraError as e:
                raise UsageError(f"--tensor-parallel {self.tensor_parallel}: {e}") from None

    def resolve(self, cfg):
        """-> (Schedule, partition) validated against the model."""
        if self.plan:
            from planner.plan import load_plan, plan_to_schedule  # lazy: the planner loads JAX
            from planner.errors import PlanError  # lazy: as above
            plan = load_plan(self.plan)
            try:
                schedule = plan_to_schedule(plan)
            except PlanError as e:
                raise UsageError(f"plan {self.plan}: {e}") from None
            partition = plan_run.plan_partition(self, plan, cfg)
            if partition[-1][1] != cfg.num_units:      # a plan without a recorded model is checked here
                raise UsageError(f"plan {self.plan}: its stages cover units 0..{partition[-1][1] - 1}, but "
                                 f"{cfg.name} has {cfg.num_units} units")
            self._check_counts(schedule, "plan " + self.plan)
        elif isinstance(self.schedule, Schedule):
            schedule = self.schedule
            partition = None
            self._check_counts(schedule, f"schedule {schedule.name!r}")
        elif self.schedule.endswith(".json") or Path(self.schedule).is_file():
            schedule = load_schedule(self.schedule)
            partition = None
            self._check_counts(schedule, "schedule file " + self.schedule)
        else:
            if self.schedule not in schedules.SCHEDULES:
                raise UsageError(f"unknown schedule {self.schedule!r}; choose from "
                                 f"{', '.join(schedules.SCHEDULES)} or give a schedule JSON file")
            chunks = {} if self.virtual_stages is None else {"virtual_stages": self.virtual_stages}
            try:
                schedule = schedules.generate(
                    self.schedule, self.stages or DEFAULT_STAGES, self.microbatches or DEFAULT_MICROBATCHES,
                    adjusted=self.adjusted,
                    recompute=self.adjusted_policy, swap_blocks=self.swap_blocks,
                    swap_fraction=self.swap_fraction, **chunks)
            except schedules.ScheduleError as e:
                raise UsageError(str(e)) from None
            partition = None
        schedule = first_weight_grad(schedule, self.first_weight_grad)
        validate(schedule)
        if self.partition is not None:
            partition = self._given_partition(schedule, cfg)
        if partition is None:
            partition = models.even_partition(cfg.num_units, schedule.num_stages)
        return schedule, [tuple(int(v) for v in r) for r in partition]

    def _given_partition(self, schedule: Schedule, cfg) -> list[tuple[int, int]]:
        """--partition's unit counts as ranges, checked against the schedule and model."""
        counts = self.partition
        if self.plan:
            raise UsageError("--partition: a plan fixes the partition (drop one of them)")
        if len(counts) != schedule.num_stages:
            raise UsageError(f"--partition gives {len(counts)} stages, the schedule has {schedule.num_stages} "
                             "model stages (devices x chunks per device)")
        if sum(counts) != cfg.num_units:
            raise UsageError(f"--partition covers {sum(counts)} units, {cfg.name} has {cfg.num_units} (the "
                             "embedding, attention and MLP of each layer, the head)")
        edges = [0]
        for n in counts:
            edges.append(edges[-1] + n)
        return list(zip(edges[:-1], edges[1:]))

    def planned_peaks(self) -> tuple[int, ...] | None:
        """The plan's predicted per-stage peak bytes (weights + kept activations),
        or None when the run has no plan or is not comparable with it."""
        if not self.plan or plan_run.comparable(self, self.model_config()) is False:
            return None
        from planner.plan import load_plan  # lazy: the planner loads JAX
        return tuple(int(st.predicted_peak_bytes) for st in load_plan(self.plan).stages)

    def adjusted_stages(self, schedule) -> tuple[int, ...]:
        """Adjusted stages, in the one meaning plan and train output share (plan_run)."""
        return plan_run.adjusted_stages(self, schedule)

    def plan_labels(self) -> dict:
        """The plan keys of the run's summary ({} without a plan)."""
        return plan_run.plan_labels(self)

    def _check_counts(self, schedule, what: str) -> None:
        for flag, have in (("stages", schedule.num_stages), ("microbatches", schedule.num_microbatches)):
            want = getattr(self, flag)
            if want is not None and want != have:
                raise UsageError(f"--{flag} {want} disagrees with the {have} of {what}")

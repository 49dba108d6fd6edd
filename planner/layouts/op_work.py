"""Analytic work of every named op of a transformer unit: FLOPs and HBM bytes of
each kernel it launches, forward and backward, for one micro-batch.

This is the roofline half of the sweep's layer cost model (unit_costs.py turns it
into seconds); it mirrors the ops of models/llama.py and models/gpt.py one by one,
with the compute dtype of the config. A kernel's time is max(FLOPs / rate, bytes /
HBM bandwidth), and an op's time is the sum over its kernels.

Per op we also record:
- `tp_split`: Megatron tensor parallelism divides the op (column-parallel q/k/v/qkv,
  gate/up, head-parallel attention, row-parallel attn_proj/mlp_down, vocab-parallel
  logits). The rest (norms, residual adds) are replicated on every TP rank unless
  sequence parallelism shards them along the sequence.
  A model's registration may shard less (models.tensor_parallel): an op is split only
  in a unit kind its family's registration shards (planner.layouts.unit_costs), so
  the embedding, which neither built-in family shards, runs whole on every rank.
- `recomputed_in_backward`: whether remat must recompute the op to run the backward
  when it is in the recompute set. attn_proj, attn_res, mlp_down, mlp_res and embed
  feed no VJP of their own unit (the add's and the gather's VJPs need no primal), so
  jax.checkpoint never redoes them, even under `full`.

Attention: the MFU convention counts the full square (4·B·T²·heads·head_dim forward);
flash kernels (cuDNN) execute only the causal half, XLA's dot_product_attention runs
the full square through HBM: logits in float32, softmax, probabilities in the compute
dtype. Softmax internals are never named (models/ops.py), so XLA attention recomputes
its scores inside every backward; flash recomputes them by construction.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlanError

MATMUL, FLASH, MEMORY = "matmul", "flash", "memory"
ATTENTIONS = ("xla", "cudnn")


@dataclass(frozen=True)
class Kernel:
    flops: float
    bytes: float
    rate: str = MATMUL        # which achieved rate bounds its FLOPs


@dataclass(frozen=True)
class OpWork:
    name: str
    unit: str                          # embed | attn | mlp | head
    fwd: tuple[Kernel, ...]
    bwd: tuple[Kernel, ...]
    tp_split: bool
    recomputed_in_backward: bool = True
    kept_elems: float = 0.0            # output elements a backward needs (saved unless recomputed)


def _gemm(m: float, k: float, n: float, c: int) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """[m,k] @ [k,n]: forward one GEMM; backward dX and dW (same FLOPs each)."""
    fwd = (Kernel(2 * m * k * n, c * (m * k + k * n + m * n)),)
    bwd = (Kernel(2 * m * k * n, c * (m * n + k * n + m * k)),
           Kernel(2 * m * k * n, c * (m * k + m * n) + 4 * k * n))   # fp32 weight grad
    return fwd, bwd


def _elementwise(elems: float, reads: float, writes: float, bwd_reads: float, bwd_writes: float,
                 c: int) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    return ((Kernel(0.0, c * elems * (reads + writes), MEMORY),),
            (Kernel(0.0, c * elems * (bwd_reads + bwd_writes), MEMORY),))


def _attention(b: int, t: int, heads: int, kv_heads: int, hd: int, impl: str, c: int):
    qkv_bytes = c * b * t * hd * (2 * heads + 2 * kv_heads)        # read q,k,v + write o
    square = 2.0 * b * t * t * heads * hd                           # one full-square GEMM
    scores = float(b) * heads * t * t
    if impl == "cudnn":
        # Flash: 2 causal-half GEMMs forward; backward recomputes S and P and runs
        # dV, dP, dQ, dK: 5 half-GEMMs. Softmax stats (float32, B*heads*T) are kept.
        fwd = (Kernel(2 * square / 2, qkv_bytes + 4 * b * heads * t, FLASH),)
        bwd = (Kernel(5 * square / 2, 2 * qkv_bytes + 4 * b * heads * t, FLASH),)
        return fwd, bwd
    # XLA: QK^T writes f32 logits, a softmax pass reads them and writes probs, PV reads
    # the probs. Backward: recompute logits and probs (never named), dP = dO V^T,
    # dV = P^T dO, softmax backward, dQ = dS K, dK = dS^T Q.
    qk = Kernel(square, c * b * t * hd * (heads + kv_heads) + 4 * scores)
    softmax = Kernel(0.0, (4 + c) * scores, MEMORY)
    pv = Kernel(square, c * scores + c * b * t * hd * (kv_heads + heads))
    fwd = (qk, softmax, pv)
    grads = (Kernel(square, c * scores + c * b * t * hd * (heads + kv_heads)),        # dP
             Kernel(square, c * scores + c * b * t * hd * (heads + kv_heads)),        # dV
             Kernel(0.0, (c + c + 4) * scores, MEMORY),                               # dS
             Kernel(square, 4 * scores + c * b * t * hd * (kv_heads + heads)),        # dQ
             Kernel(square, 4 * scores + c * b * t * hd * (heads + kv_heads)))        # dK
    return fwd, (qk, softmax) + grads


def layer_ops(family: str, *, hidden: int, num_heads: int, num_kv_heads: int, ffn_hidden: int,
              seq_len: int, micro_batch: int, attention: str, compute_bytes: int = 2
              ) -> tuple[OpWork, ...]:
    """The ops of one attention unit and one MLP unit, in forward order.

    kept_elems follows what jax.vjp keeps for models/llama.py and models/gpt.py:
    q and k before RoPE feed only the (linear) rope, attn_proj/mlp_down feed only the
    residual add, and attn_res/mlp_res are the next unit's input (kept there), so
    those keep nothing of their own."""
    if attention not in ATTENTIONS:
        raise PlanError(f"unknown attention {attention!r}; valid: {', '.join(ATTENTIONS)}")
    if family not in ("llama", "gpt"):
        raise PlanError(f"unknown model family {family!r}; valid: llama, gpt")
    c = compute_bytes
    n = float(micro_batch * seq_len)          # tokens
    d, f, hd = hidden, ffn_hidden, hidden // num_heads
    q_dim, kv_dim = num_heads * hd, num_kv_heads * hd
    norm = _elementwise(n * d, 1, 1, 2, 1, c)                 # fused norm: x -> y; dy,x -> dx
    add = _elementwise(n * d, 2, 1, 1, 1, c)                  # y = x + o; dx = do = dy
    attention_work = _attention(micro_batch, seq_len, num_heads, num_kv_heads, hd, attention, c)
    ops: list[OpWork] = [OpWork("attn_norm", "attn", *norm, tp_split=False, kept_elems=n * d)]
    if family == "llama":
        ops += [OpWork("q", "attn", *_gemm(n, d, q_dim, c), tp_split=True),
                OpWork("k", "attn", *_gemm(n, d, kv_dim, c), tp_split=True),
                OpWork("v", "attn", *_gemm(n, d, kv_dim, c), tp_split=True, kept_elems=n * kv_dim),
                OpWork("q_rope", "attn", *_elementwise(n * q_dim, 1, 1, 1, 1, c), tp_split=True,
                       kept_elems=n * q_dim),
                OpWork("k_rope", "attn", *_elementwise(n * kv_dim, 1, 1, 1, 1, c), tp_split=True,
                       kept_elems=n * kv_dim)]
    else:
        ops += [OpWork("qkv", "attn", *_gemm(n, d, q_dim + 2 * kv_dim, c), tp_split=True,
                       kept_elems=n * (q_dim + 2 * kv_dim))]
    ops += [OpWork("attn_core", "attn", *attention_work, tp_split=True, kept_elems=n * q_dim),
            OpWork("attn_proj", "attn", *_gemm(n, q_dim, d, c), tp_split=True,
                   recomputed_in_backward=False),
            OpWork("attn_res", "attn", *add, tp_split=False, recomputed_in_backward=False),
            OpWork("mlp_norm", "mlp", *norm, tp_split=False, kept_elems=n * d)]
    if family == "llama":
        ops += [OpWork("mlp_gate", "mlp", *_gemm(n, d, f, c), tp_split=True, kept_elems=n * f),
                OpWork("mlp_up", "mlp", *_gemm(n, d, f, c), tp_split=True, kept_elems=n * f),
                OpWork("mlp_act", "mlp", *_elementwise(n * f, 1, 1, 2, 1, c), tp_split=True,
                       kept_elems=n * f),
                OpWork("mlp_mul", "mlp", *_elementwise(n * f, 2, 1, 3, 2, c), tp_split=True,
                       kept_elems=n * f)]
    else:
        ops += [OpWork("mlp_up", "mlp", *_gemm(n, d, f, c), tp_split=True, kept_elems=n * f),
                OpWork("mlp_act", "mlp", *_elementwise(n * f, 1, 1, 2, 1, c), tp_split=True,
                       kept_elems=n * f)]
    ops += [OpWork("mlp_down", "mlp", *_gemm(n, f, d, c), tp_split=True,
                   recomputed_in_backward=False),
            OpWork("mlp_res", "mlp", *add, tp_split=False, recomputed_in_backward=False)]
    return tuple(ops)


def edge_ops(*, hidden: int, vocab_size: int, seq_len: int, micro_batch: int,
             compute_bytes: int = 2, param_bytes: int = 4) -> tuple[OpWork, ...]:
    """Embedding and head (final norm, logits, float32 cross-entropy). `loss` is not a
    named op: it stands for the logsumexp pass the head always runs."""
    c = compute_bytes
    n, d, v = float(micro_batch * seq_len), hidden, vocab_size
    embed = OpWork("embed", "embed",
                   (Kernel(0.0, n * d * (param_bytes + c), MEMORY),),
                   # scatter-add of the token rows into a zeroed float32 table grad
                   (Kernel(0.0, n * d * (c + 2 * 4) + v * d * 4, MEMORY),),
                   tp_split=True, recomputed_in_backward=False)
    final_norm = OpWork("final_norm", "head", *_elementwise(n * d, 1, 1, 2, 1, c), tp_split=False,
                        kept_elems=n * d)
    logits = OpWork("logits", "head", *_gemm(n, d, v, c), tp_split=True, kept_elems=n * v)
    # logsumexp in float32 over the logits; backward writes softmax - onehot.
    loss = OpWork("loss", "head", (Kernel(0.0, n * v * (c + 4), MEMORY),),
                  (Kernel(0.0, n * v * (c + 4 + c), MEMORY),), tp_split=True,
                  recomputed_in_backward=False)
    return embed, final_norm, logits, loss

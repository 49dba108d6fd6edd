"""A three-stage toy pipeline (embedding, tanh layer, softmax head) as pure
functions, for engine tests that do not need the real models."""
import jax
import jax.numpy as jnp

from obscura_jax.runtime.stage_program import StageProgram

V, D, B, T = 16, 8, 2, 5


def embed(p, tokens):
    return p["emb"][tokens]


def layer(p, x):
    return jnp.tanh(x @ p["w"]) + x


def head(p, x, targets):
    logp = jax.nn.log_softmax(x @ p["w"])
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], -1))


def params(seed=0, d=D):
    k = jax.random.split(jax.random.key(seed), 3)
    return [{"emb": jax.random.normal(k[0], (V, d))},
            {"w": jax.random.normal(k[1], (d, d)) * 0.3},
            {"w": jax.random.normal(k[2], (d, V)) * 0.3}]


def programs(devices, d=D):
    ps = params(d=d)
    tok = jnp.zeros((B, T), jnp.int32)
    h = jnp.zeros((B, T, d))
    return [StageProgram(embed, takes_tokens=True, returns_loss=False, device=devices[0],
                         params_like=ps[0], x_like=tok, name="embed"),
            StageProgram(layer, takes_tokens=False, returns_loss=False, device=devices[1],
                         params_like=ps[1], x_like=h, name="layer"),
            StageProgram(head, takes_tokens=False, returns_loss=True, device=devices[2],
                         params_like=ps[2], x_like=h, targets_like=tok, name="head")]


def full_loss(ps, tokens, targets):
    return head(ps[2], layer(ps[1], embed(ps[0], tokens)), targets)

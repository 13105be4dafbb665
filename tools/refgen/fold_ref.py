"""fold_ref.py - DeepMind's AlphaFold2 (alphafold-colabfold, JAX on the CPU) as the
reference for models/fold: a reduced-depth monomer config at the real widths,
random parameters in DeepMind's npz layout, the input features of AlphaFold's own
data pipeline made deterministic, and a float32 forward with recycling.

Shared by the make_fold_*_fixtures.py scripts. Nothing here patches the model:
the config switches off what our C code does not do (templates, bfloat16,
subbatching, fused triangle projections, masked-MSA replacement) and the
pipeline's MSA shuffle is made the identity (the model is invariant to the
order of MSA rows past the first up to float rounding; ours keeps file order).
"""
import copy
import numpy as np

import jax
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_default_matmul_precision", "highest")
import jax.numpy as jnp
import haiku as hk

from alphafold.model import config as af_config
from alphafold.model import modules, features
from alphafold.model.tf import np_backend
from alphafold.data import pipeline, parsers
from alphafold.common import residue_constants as rc


def make_config(n_evo=1, n_extra=1, ptm=True, num_recycle=0, max_msa_clusters=512, max_extra_msa=1024,
                widths=None):
    """model_3(_ptm) config with n_evo Evoformer and n_extra extra-MSA blocks, float32, no templates."""
    cfg = copy.deepcopy(af_config.model_config('model_3_ptm' if ptm else 'model_3'))
    e = cfg.model.embeddings_and_evoformer
    e.evoformer_num_block = n_evo
    e.extra_msa_stack_num_block = n_extra
    e.template.enabled = False
    for blk in (e.evoformer,):
        blk.triangle_multiplication_outgoing.fuse_projection_weights = False
        blk.triangle_multiplication_incoming.fuse_projection_weights = False
    g = cfg.model.global_config
    g.bfloat16 = False
    g.deterministic = True
    g.subbatch_size = 1 << 30   # never subbatch
    g.use_remat = False
    g.zero_init = False
    g.eval_dropout = False
    cfg.model.num_recycle = num_recycle
    cfg.model.calc_extended_ptm = False    # RunModel sets these two; we call the module directly
    cfg.model.use_probs_extended = False
    cfg.data.common.num_recycle = num_recycle
    cfg.data.eval.masked_msa_replace_fraction = 0.0
    cfg.data.eval.max_msa_clusters = max_msa_clusters
    cfg.data.common.max_extra_msa = max_extra_msa
    cfg.data.common.use_templates = False
    cfg.data.common.resample_msa_in_recycling = False
    cfg.data.eval.num_ensemble = 1
    if widths:   # narrow test models: {'msa': c_m, 'pair': c_z, 'seq': c_s, 'extra': c_e}
        e.msa_channel = widths['msa']
        e.pair_channel = widths['pair']
        e.seq_channel = widths['seq']
        e.extra_msa_channel = widths['extra']
        cfg.model.heads.structure_module.num_channel = widths['seq']
    return cfg


def features_of(sequence, a3m=None, cfg=None):
    """AlphaFold's processed features for one sequence and an optional a3m MSA (its first row the query)."""
    if a3m is None:
        msa = parsers.Msa(sequences=[sequence], deletion_matrix=[[0] * len(sequence)], descriptions=['query'])
    else:
        # ColabFold's a3m files start with a '#' line, which it drops before AlphaFold's parser
        msa = parsers.parse_a3m('\n'.join(l for l in a3m.splitlines() if not l.startswith('#')))
        # DeepMind's make_msa_features drops a row equal to an earlier one (alphafold-colabfold's copy
        # has those lines commented out): the same filter here
        seen, keep = set(), []
        for k, seq in enumerate(msa.sequences):
            if seq not in seen:
                seen.add(seq)
                keep.append(k)
        msa = parsers.Msa(sequences=[msa.sequences[k] for k in keep],
                          deletion_matrix=[msa.deletion_matrix[k] for k in keep],
                          descriptions=[msa.descriptions[k] for k in keep])
    raw = {**pipeline.make_sequence_features(sequence=sequence, description='query', num_res=len(sequence)),
           **pipeline.make_msa_features([msa])}
    saved = np_backend.random_shuffle if hasattr(np_backend, 'random_shuffle') else None
    np_backend.random_shuffle = lambda x, *a, **k: np.asarray(x)
    try:
        feat = features.np_example_to_features(np_example=raw, config=cfg, random_seed=0)
    finally:
        if saved is not None:
            np_backend.random_shuffle = saved
    return {k: np.asarray(v) for k, v in feat.items()}


def _forward_fn(cfg):
    def fn(batch):
        model = modules.AlphaFold_noE(cfg.model)
        return model(batch, is_training=False, return_representations=True)
    return hk.transform(fn)


def perturb(params, seed, bits=6):
    """Every array replaced by random values of a trained model's kind of scale, rounded to 6
    significant bits (the npz then compresses well): weights ~ N(0, 1/fan_in), biases and
    offsets ~ N(0, 0.1), scales ~ 1 + N(0, 0.1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for mod in sorted(params):
        out[mod] = {}
        stacked = 'evoformer_iteration' in mod or 'extra_msa_stack' in mod
        for name in sorted(params[mod]):
            a = np.asarray(params[mod][name])
            base = a.shape[1:] if stacked else a.shape
            if name in ('scale',):
                v = 1.0 + 0.1 * rng.standard_normal(a.shape)
            elif name in ('offset', 'bias') or name.endswith('_b') or name.endswith('biases'):
                v = 0.1 * rng.standard_normal(a.shape)
            else:
                # fan-in: [c_in, heads, c] projections read c_in; output_w [heads, c, c_out] and
                # weights [in, out] (or [a, b, out]) read all but the last dimension
                if name in ('query_w', 'key_w', 'value_w', 'gating_w') or len(base) < 2:
                    fan_in = base[0] if base else 1
                else:
                    fan_in = int(np.prod(base[:-1]))
                v = rng.standard_normal(a.shape) / np.sqrt(max(fan_in, 1))
            if mod.endswith('affine_update'):
                # backbone steps of a few Angstrom per layer, as a trained model takes (full-scale random
                # updates put a 14-residue chain 150 A wide, where float32 alone is 1e-3 A of noise)
                v = v / 8.0
            v = v.astype(np.float32)
            m, e = np.frexp(v)
            v = np.ldexp(np.round(m * 2.0 ** bits) / 2.0 ** bits, e).astype(np.float32)
            out[mod][name] = v
    return out


def zero_prev(cfg, n):
    e = cfg.model.embeddings_and_evoformer
    return {'prev_msa_first_row': jnp.zeros([n, e.msa_channel], jnp.float32),
            'prev_pair': jnp.zeros([n, n, e.pair_channel], jnp.float32),
            'prev_pos': jnp.zeros([n, 37, 3], jnp.float32)}


def init_params(cfg, batch, seed=0, bits=6):
    fwd = _forward_fn(cfg)
    b = dict(batch)
    b['prev'] = zero_prev(cfg, batch['aatype'].shape[-1])
    params = fwd.init(jax.random.PRNGKey(seed), b)
    return perturb(hk.data_structures.to_mutable_dict(params), seed, bits)


def flat(params):
    return {f'{m}//{n}': v for m in params for n, v in params[m].items()}


def save_npz(path, params):
    np.savez_compressed(path, **flat(params))


_APPLY = {}


def run(cfg, params, batch, num_recycle):
    """num_recycle + 1 passes in float32, as AlphaFold's inference loop; the outputs of every pass.
    The jitted forward is kept per config, so a second run of one shape does not compile again."""
    key = id(cfg)
    if key not in _APPLY:
        _APPLY[key] = (cfg, jax.jit(_forward_fn(cfg).apply))
    apply = _APPLY[key][1]
    prev = zero_prev(cfg, batch['aatype'].shape[-1])
    outs = []
    for _ in range(num_recycle + 1):
        b = dict(batch)
        b['prev'] = prev
        ret = apply(params, jax.random.PRNGKey(0), b)
        prev = {k: jnp.asarray(v, jnp.float32) for k, v in ret['prev'].items()}
        outs.append(jax.tree_util.tree_map(np.asarray, ret))
    return outs

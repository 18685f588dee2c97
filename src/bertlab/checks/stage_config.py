"""The config stage: built from another config (``other_config``), the module equals HF's, and a
size, eps or probability wired in is named.
"""

from __future__ import annotations

import copy
import re

import torch
from torch import nn

from bertlab import diagnose
from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.harness import (
    load_weights,
    state_shapes,
)
from bertlab.checks.module_base import ModuleBase
from bertlab.checks.other_config import SIZE_FIELDS, config_sizes, describe_config


class ConfigChecks(ModuleBase):
    """Stage config (``bertlab.checks.stages``)."""

    def check_config(self, cls, ctx: Context) -> None:
        """Built from another config, the module equals HF's built from it: no size is wired in.

        The other config (``other_config``) differs in every size, in ``layer_norm_eps`` and in
        the dropout probabilities; HF's module of it has random weights (LayerNorm's too), loaded
        into the learner's module, and both run on random inputs of its sizes.
        """
        other = ctx.other()
        layer = self.layers(other)[0]
        hf = self.reference(other, layer)
        module = self.build(cls, other)
        against = f"HF's {self.title} built from another config ({describe_config(other.model.config)})"
        if isinstance(module, nn.Module):
            explain_sizes(self, module, hf, ctx.model.config, other.model.config, against)
            try:
                load_weights(module, hf.state_dict())
            except RuntimeError as err:
                self.fail(
                    f"the weights of {against} do not load: {str(err).splitlines()[0]}",
                    "Read every size from `config`, never from the pretrained model.",
                )
        for _ in range(2):
            inputs, description = self.random_inputs(other)
            with torch.no_grad():
                expected = {k: v.float() for k, v in self.call(hf, inputs).items()}
                got = self.call(module, inputs)
            if self.close_with_random_weights(expected, got):
                continue
            try:
                # Diagnosed too: a mistake the pretrained model's tiny eps hides (eps added to the
                # std, say) shows with this config's large one.
                self.compare(expected, got, self.outputs, f"{against} on {description}", diagnose_with=(hf, inputs))
            except CheckFailed as err:
                # A tiny eps typed in (the pretrained 1e-12) and torch's default 1e-5 both look alike
                # next to this config's large eps: the closer of the two is named, measured.
                if err.mistake in (None, "layernorm-eps-default"):
                    typed = self.eps_distance(hf, inputs, got, ctx.model.config.layer_norm_eps)
                    default = self.eps_distance(hf, inputs, got, nn.LayerNorm(1).eps)
                    if typed <= self.atol and typed < default:
                        mistake = diagnose.REGISTRY["layernorm-eps-typed"]
                        raise err.adding(mistake.hint(), mistake=mistake.id, headline_only=True) from None
                if err.mistake is not None:
                    raise
                hint = "Read every size from `config` (or from the inputs' shapes), never from the pretrained model."
                raise err.adding(hint) from None

    def close_with_random_weights(self, expected: dict, got: dict) -> bool:
        """Whether ``got`` equals ``expected`` (HF's, under the other config's random weights).

        Random weights give larger values than the pretrained ones: a wrong size, eps or argument
        moves them by far more than float32's relative precision, which is all this allows on
        top of the task's atol (a right softmax written another way differs by that much).
        """
        return all(
            isinstance(got.get(k), torch.Tensor)
            and got[k].shape == v.shape
            and got[k].dtype == v.dtype
            and bool(torch.allclose(got[k].detach().float(), v.float(), atol=self.atol, rtol=1e-5))
            for k, v in expected.items()
        )

    def eps_distance(self, hf: nn.Module, inputs: dict, got: dict, eps: float) -> float:
        """How far ``got`` is from HF's module with ``eps`` in every LayerNorm (inf: no LayerNorm)."""
        if not any(isinstance(m, nn.LayerNorm) for m in hf.modules()):
            return float("inf")
        other = copy.deepcopy(hf)
        for m in other.modules():
            if isinstance(m, nn.LayerNorm):
                m.eps = eps
        with torch.no_grad():
            wrong = {k: v.float() for k, v in self.call(other, inputs).items()}
        if any(not isinstance(got.get(k), torch.Tensor) or got[k].shape != v.shape for k, v in wrong.items()):
            return float("inf")
        return max(float((got[k].detach().float() - v).abs().max()) for k, v in wrong.items())


def _wired(task, field: str, value, pretrained, config, *details: str) -> None:
    """Fail: the learner's module has ``value`` where ``config.<field>`` says otherwise."""
    theirs = config_sizes(pretrained).get(field, getattr(pretrained, field, None))
    want = config_sizes(config).get(field, getattr(config, field, None))
    origin = " (the pretrained model's)" if value == theirs else ""
    task.fail(f"built with {field} {value}{origin} where config.{field} = {want}: read sizes from config", *details)


def _field_for(value: int, want: int, pretrained, config) -> str | None:
    """The size field whose other-config value is ``want`` and pretrained value is ``value`` (or just ``want``)."""
    old, new = config_sizes(pretrained), config_sizes(config)
    fields = [f for f in SIZE_FIELDS if new[f] == want]
    return next((f for f in fields if old[f] == value), fields[0] if fields else None)


def _layer_count(names) -> int:
    return len({m.group(1) for n in names if (m := re.search(r"(?:^|\.)layer\.(\d+)(?:\.|$)", n))})


def explain_sizes(task, module: nn.Module, hf: nn.Module, pretrained, config, against: str) -> None:
    """Fail naming the size the learner wired in, when ``module`` (built from ``config``) shows one.

    Compares, with HF's ``hf`` built from the same config: the number of layers, every parameter's
    shape, the attributes HF keeps sizes in (``num_attention_heads``, ``attention_head_size``,
    ``all_head_size``), each LayerNorm's eps and each Dropout's p.
    """
    mine = state_shapes(module)
    theirs = state_shapes(hf)
    have, want = _layer_count(mine), _layer_count(theirs)
    if have != want:
        _wired(task, "num_hidden_layers", have, pretrained, config)
    for key, shape in theirs.items():
        if key in mine and mine[key] != shape:
            detail = f"`{key}` has shape {list(mine[key])}, expected {list(shape)} like {against}"
            for got, expected in zip(mine[key], shape, strict=False):
                field = _field_for(got, expected, pretrained, config) if got != expected else None
                if field is not None:
                    _wired(task, field, got, pretrained, config, detail)
            task.fail(f"parameter shapes differ from {against}", detail, "Read every size from `config`.")
    mine_modules = dict(module.named_modules())
    for name, sub in hf.named_modules():
        learner = mine_modules.get(name)
        if learner is None:
            continue
        where = f"`self.{name}`" if name else "the module"
        for attr in ("num_attention_heads", "attention_head_size", "all_head_size"):
            value = getattr(learner, attr, None)
            if hasattr(sub, attr) and isinstance(value, int) and value != getattr(sub, attr):
                field = "hidden_size" if attr == "all_head_size" else attr
                _wired(task, field, value, pretrained, config, f"{where}.{attr} is {value}")
        if isinstance(sub, nn.LayerNorm):
            eps = getattr(learner, "eps", None)
            if isinstance(eps, float) and eps != sub.eps:
                typed = eps == pretrained.layer_norm_eps
                origin = " (the pretrained model's)" if typed else ""
                task.fail(
                    f"{where}: LayerNorm eps is {eps:g}{origin}, not config.layer_norm_eps = {sub.eps:g}",
                    "Pass eps=config.layer_norm_eps to nn.LayerNorm.",
                    mistake=diagnose.REGISTRY["layernorm-eps-typed"] if typed else None,
                )
        if isinstance(sub, nn.Dropout) and isinstance(learner, nn.Dropout) and learner.p != sub.p:
            field = (
                "attention_probs_dropout_prob"
                if sub.p == config.attention_probs_dropout_prob
                else "hidden_dropout_prob"
            )
            origin = " (the pretrained model's)" if learner.p == getattr(pretrained, field) else ""
            task.fail(
                f"{where}: dropout p is {learner.p:g}{origin}, not config.{field} = {sub.p:g}",
                f"Build it with nn.Dropout(config.{field}).",
            )

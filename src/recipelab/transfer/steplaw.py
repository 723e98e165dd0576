"""The export's learning rate and global batch: Step Law, anchored at what the proxy measured.

Step Law (Li et al. 2025, arXiv 2503.04715) fits the best peak learning rate and global batch of
LLM pretraining over about 3,700 dense and MoE runs as power laws of the non-embedding
parameters ``N`` and the training tokens ``D``:

    η(N, D) = 1.79 · N^-0.713 · D^0.307        B(D) = 0.58 · D^0.571 tokens

Its absolute values come from other data, tokenizers and code, so the export reads the law only
as a ratio between two scales: the target gets the law's value at its own scale times the ratio
the campaign measured on the proxy (the rate and batch the winner trained at, at the tokens it
trained, over the law's values there). Both move the same way the cloud run does: the batch
grows with the data, and the rate falls with the model's size and rises, slowly, with the data
its larger batch reads. The size exponent may be the campaign's own
(:mod:`recipelab.transfer.size_exponent`): the ratio is then ``(N_target / N_proxy)^exponent``
times the law's ratio in ``D``.
"""

from __future__ import annotations

from dataclasses import dataclass

from recipelab.recipe import Recipe, Shape, non_embedding_params

LR_COEFFICIENT = 1.79
LR_PARAMS_EXPONENT = -0.713
LR_TOKENS_EXPONENT = 0.307
BATCH_COEFFICIENT = 0.58
BATCH_TOKENS_EXPONENT = 0.571
SOURCE = "Step Law (Li et al. 2025, arXiv 2503.04715)"


def law_learning_rate(params: int, tokens: int) -> float:
    """The law's best peak learning rate for ``params`` non-embedding parameters trained on
    ``tokens`` tokens."""
    return float(LR_COEFFICIENT * params ** LR_PARAMS_EXPONENT * tokens ** LR_TOKENS_EXPONENT)


def law_batch_tokens(tokens: int) -> float:
    """The law's best global batch, in tokens, for a run of ``tokens`` tokens."""
    return float(BATCH_COEFFICIENT * tokens ** BATCH_TOKENS_EXPONENT)


@dataclass(frozen=True)
class Scale:
    """One point of the law: non-embedding parameters and training tokens."""

    params: int
    tokens: int

    @property
    def learning_rate(self) -> float:
        return law_learning_rate(self.params, self.tokens)

    @property
    def batch_tokens(self) -> float:
        return law_batch_tokens(self.tokens)


@dataclass(frozen=True)
class Anchored:
    """The law carried from the proxy, where the campaign measured a rate and a batch, to the
    target. ``lr_anchor`` and ``batch_anchor`` are measured / law at the proxy."""

    proxy: Scale
    target: Scale
    proxy_lr: float
    proxy_batch_tokens: int
    params_exponent: float = LR_PARAMS_EXPONENT

    @classmethod
    def at(cls, measured: Recipe, target_shape: Shape, target_tokens: int,
           params_exponent: float = LR_PARAMS_EXPONENT) -> Anchored:
        """The law anchored at ``measured`` (the winner as it trained on the proxy), its rate
        carried in size by ``params_exponent``."""
        return cls(Scale(non_embedding_params(measured.shape), measured.tokens),
                   Scale(non_embedding_params(target_shape), target_tokens),
                   measured.optimizer.lr, measured.tokens_per_step, params_exponent)

    @property
    def lr_anchor(self) -> float:
        return self.proxy_lr / self.proxy.learning_rate

    @property
    def batch_anchor(self) -> float:
        return self.proxy_batch_tokens / self.proxy.batch_tokens

    @property
    def size_factor(self) -> float:
        """``params_exponent``'s size ratio over the law's: 1 at the law's exponent."""
        return float((self.target.params / self.proxy.params)
                     ** (self.params_exponent - LR_PARAMS_EXPONENT))

    @property
    def learning_rate(self) -> float:
        """The target's rate, at most 1: the law at the target × the proxy's anchor, with the
        law's size ratio replaced by ``params_exponent``'s (:attr:`size_factor`)."""
        return min(1.0, self.target.learning_rate * self.lr_anchor * self.size_factor)

    @property
    def batch_tokens(self) -> float:
        """The target's global batch in tokens: the law at the target × the proxy's anchor."""
        return self.target.batch_tokens * self.batch_anchor

    def describe_lr(self) -> str:
        own = ("" if self.params_exponent == LR_PARAMS_EXPONENT else
               f"; carried in size by N^{self.params_exponent:.3f}, the campaign's exponent, "
               f"instead of the law's")
        return (f"η = {LR_COEFFICIENT}·N^{LR_PARAMS_EXPONENT}·D^{LR_TOKENS_EXPONENT} ({SOURCE}): "
                f"{self.proxy.learning_rate:.4g} at the proxy (N {self.proxy.params:,}, "
                f"D {self.proxy.tokens:,}), {self.target.learning_rate:.4g} at the target "
                f"(N {self.target.params:,}, D {self.target.tokens:,}); anchored × "
                f"{self.lr_anchor:.3g}, the proxy's measured {self.proxy_lr:.4g} / the law's "
                f"{self.proxy.learning_rate:.4g}{own}")

    def describe_batch(self) -> str:
        return (f"B = {BATCH_COEFFICIENT}·D^{BATCH_TOKENS_EXPONENT} tokens ({SOURCE}): "
                f"{self.proxy.batch_tokens:,.0f} at the proxy, {self.target.batch_tokens:,.0f} at "
                f"the target; anchored × {self.batch_anchor:.3g}, the proxy's measured "
                f"{self.proxy_batch_tokens:,} / the law's {self.proxy.batch_tokens:,.0f}")

    def to_json(self) -> dict[str, object]:
        return {"source": SOURCE,
                "lr": {"coefficient": LR_COEFFICIENT, "params_exponent": LR_PARAMS_EXPONENT,
                       "tokens_exponent": LR_TOKENS_EXPONENT},
                "batch": {"coefficient": BATCH_COEFFICIENT,
                          "tokens_exponent": BATCH_TOKENS_EXPONENT},
                "proxy": {"params": self.proxy.params, "tokens": self.proxy.tokens,
                          "law_lr": self.proxy.learning_rate, "measured_lr": self.proxy_lr,
                          "law_batch_tokens": self.proxy.batch_tokens,
                          "measured_batch_tokens": self.proxy_batch_tokens},
                "target": {"params": self.target.params, "tokens": self.target.tokens,
                           "law_lr": self.target.learning_rate, "lr": self.learning_rate,
                           "law_batch_tokens": self.target.batch_tokens,
                           "batch_tokens": self.batch_tokens},
                "lr_anchor": self.lr_anchor, "batch_anchor": self.batch_anchor,
                "lr_params_exponent": self.params_exponent}

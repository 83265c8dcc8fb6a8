"""Model descriptions and real-weights models: spec/graph (device model), minilm/weights/assets
(accuracy on real all-MiniLM-L6-v2 weights)."""

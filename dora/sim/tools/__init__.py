"""The simulator's tools around its engine: sweeps, knob search, cost calibration, real-vs-simulated comparison."""

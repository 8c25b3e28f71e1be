"""Orchestrator-free stage code: one module (or small package) per DVC stage + shared pieces."""

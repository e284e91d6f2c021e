"""Processes and loops: the runner, its maintenance duties and the wake-up listener."""

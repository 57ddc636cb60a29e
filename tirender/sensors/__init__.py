"""Sensor models (Mitsuba 3 perspective, thinlens, orthographic): see base.py and registry.py."""

"""Figures: one registry of figure id -> drawing function -> cached tables -> caption."""

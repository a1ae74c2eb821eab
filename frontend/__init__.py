"""The Footprint tab's ES modules, shipped inside the wheel as package data."""

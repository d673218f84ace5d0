"""Shipped model profiles (YAML), loaded by eagle_datagen.profile."""

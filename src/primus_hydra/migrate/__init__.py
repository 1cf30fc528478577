"""task=import: Primus experiment files as this project's experiments (primus_yaml.py reads them as Primus does,
mapping.py finds each value's canonical key, models.py the model preset, writer.py the experiment file)."""

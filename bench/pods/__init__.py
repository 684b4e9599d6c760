"""The pods bench: one big batch on real pods, the operator scaling, against local processes."""

"""A changed job: the plan that compares its declaration with its checkpoints, and the upgrade that takes it on."""

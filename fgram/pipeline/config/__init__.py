"""The commands' typed options: the mechanism and the shared options (`options`), and
each command's config (`commands`)."""

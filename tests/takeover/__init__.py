"""A daemon cut at every publish boundary of a game, a successor taking over each time."""

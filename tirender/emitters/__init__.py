"""emitters."""

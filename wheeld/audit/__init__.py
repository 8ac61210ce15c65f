"""Looking back: captures, replay, verification, recall and export."""

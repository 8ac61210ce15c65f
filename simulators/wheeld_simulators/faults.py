"""The faults a simulated wheel can play, and the reason code each must get.

Kept apart from the physics so the command line can list them without
importing the simulator.
"""

#: Wheel faults, each with the reason code the rules must give.
WHEEL_FAULTS: dict[str, str] = {
    "same_direction": "ball_same_direction",
    "no_alternation": "direction_not_alternated",
    "few_revolutions": "insufficient_revolutions",
    "foreign_object": "foreign_object",
    "ball_out": "ball_out_of_wheel",
    "suspended_ball": "ball_not_settled",
    "rotor_stop": "rotor_stopped",
    "rotor_fault": "rotor_malfunction",
    "early_respin": "respin_too_early",
    "invalid_pocket": "invalid_pocket",
    "dropped_frame": "frame_loss",
    "corrupted_frame": "frame_loss",
    "disconnect": "wheel_link_lost",
}
FAULTS = tuple(WHEEL_FAULTS)

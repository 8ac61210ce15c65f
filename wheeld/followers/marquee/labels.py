"""The marquee's words, in Spanish and English.

Reason texts that name a rule's count are templates: ``reason_text`` fills
them from the table's configuration, so the board never says "three" on a
table whose ``rules.min_ball_revolutions`` is five.
"""

from __future__ import annotations

from wheeld.core.rules import MIN_BALL_REVOLUTIONS_FLOOR, RESPIN_ROTOR_REVOLUTIONS

LABELS: dict[str, dict[str, str]] = {
    "es": {
        "bets_open": "HAGAN JUEGO",
        "spinning": "BOLA EN JUEGO",
        "no_more_bets": "NO VA MÁS",
        "no_spin": "TIRADA NULA",
        "offline": "RULETA FUERA DE LÍNEA",
        "closed": "MESA CERRADA",
        "last_numbers": "Últimos números",
        "hot": "Calientes",
        "cold": "Fríos",
        "red": "Rojo",
        "black": "Negro",
        "green": "Cero",
        "odd": "Impar",
        "even": "Par",
        "dozens": "Docenas",
        "columns": "Columnas",
        "stats_after": "Calientes y fríos desde {n} partidas",
        "games": "partidas",
        "limits": "Límites",
        "closed_last": "Últimas tiradas",
        "table": "Mesa",
    },
    "en": {
        "bets_open": "PLACE YOUR BETS",
        "spinning": "BALL IN PLAY",
        "no_more_bets": "NO MORE BETS",
        "no_spin": "NO SPIN",
        "offline": "WHEEL OFFLINE",
        "closed": "TABLE CLOSED",
        "last_numbers": "Last numbers",
        "hot": "Hot",
        "cold": "Cold",
        "red": "Red",
        "black": "Black",
        "green": "Zero",
        "odd": "Odd",
        "even": "Even",
        "dozens": "Dozens",
        "columns": "Columns",
        "stats_after": "Hot and cold after {n} games",
        "games": "games",
        "limits": "Limits",
        "closed_last": "Last spins",
        "table": "Table",
    },
}

REASONS: dict[str, dict[str, str]] = {
    "es": {
        "ball_same_direction": "La bola giró en el mismo sentido que el cilindro",
        "direction_not_alternated": "El cilindro no cambió de sentido",
        "insufficient_revolutions": "La bola no dio el mínimo de {ball_turns} vueltas",
        "foreign_object": "Objeto extraño en el cilindro",
        "ball_out_of_wheel": "La bola salió del cilindro",
        "ball_not_settled": "La bola quedó suspendida",
        "rotor_stopped": "El cilindro se detuvo",
        "rotor_malfunction": "Desperfecto mecánico",
        "respin_too_early": "Relanzamiento antes de {rotor_turns} vueltas del cilindro",
        "invalid_pocket": "Casilla no válida",
        "frame_loss": "Se perdieron datos de la ruleta",
        "wheel_link_lost": "Se perdió la conexión con la ruleta",
        "declared": "Declarada por el jefe de mesa",
        "controller_restart": "Reinicio del controlador",
    },
    "en": {
        "ball_same_direction": "The ball turned with the wheel",
        "direction_not_alternated": "The wheel did not change direction",
        "insufficient_revolutions": "The ball did not complete the minimum {ball_turns} turns",
        "foreign_object": "Foreign object in the wheel",
        "ball_out_of_wheel": "The ball left the wheel",
        "ball_not_settled": "The ball did not settle",
        "rotor_stopped": "The wheel stopped",
        "rotor_malfunction": "Mechanical fault",
        "respin_too_early": "Re-spun before {rotor_turns} wheel turns",
        "invalid_pocket": "Invalid pocket",
        "frame_loss": "Wheel data was lost",
        "wheel_link_lost": "The wheel connection was lost",
        "declared": "Declared by the pit boss",
        "controller_restart": "Controller restarted",
    },
}


def reason_text(
    language: str, reason: str, min_ball_revolutions: int = MIN_BALL_REVOLUTIONS_FLOOR
) -> str:
    """A no-spin reason in words, its counts those of the table's rules.

    An unknown reason is shown as its code rather than hidden.
    """
    template = REASONS.get(language, REASONS["es"]).get(reason)
    if template is None:
        return reason
    return template.format(ball_turns=min_ball_revolutions, rotor_turns=RESPIN_ROTOR_REVOLUTIONS)

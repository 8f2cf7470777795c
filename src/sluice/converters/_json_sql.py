"""JsonConverter's Spark SQL pieces: expressions no Spark function provides (Kafka's base64
decimals, a `LET`), used by the rows of `sluice.converters._json_table`."""

from __future__ import annotations

_TWO64 = "18446744073709551616"


def let(value: str, name: str, body: str) -> str:
    """SQL evaluating `value` once and `body` with it bound to `name` (Spark SQL has no `LET`; a
    one-element `transform` is one): large expressions would otherwise repeat it many times."""
    return f"transform(array({value}), {name} -> {body})[0]"


def _hex64(e: str) -> str:
    return f"lpad(conv(CAST({e} AS STRING), 10, 16), 16, '0')"


def _hex128(u: str) -> str:
    """32 hex digits of a non-negative DECIMAL(38,0) below 2^128."""
    # `div` on decimals divides at 6 decimal places and may round the quotient up to the next
    # integer. Start one below it (never above the true quotient, so the products below cannot
    # overflow DECIMAL(38,0)) and carry the remainder's excess back.
    carry = f"(CASE WHEN dec_r >= {_TWO64} THEN 1 ELSE 0 END)"
    digits = f"concat({_hex64(f'(dec_q + {carry})')}, {_hex64(f'(dec_r - {carry} * {_TWO64})')})"
    rest = let(f"dec_m - dec_q * {_TWO64}", "dec_r", digits)
    return let(u, "dec_m", let(f"(dec_m div {_TWO64}) - 1", "dec_q", rest))


def decimal_to_base64(e: str) -> str:
    """Base64 of the minimal big-endian two's complement of the unscaled value (Java's
    `BigInteger.toByteArray`), in SQL: Spark has no function for it."""
    # Spark prints decimals in plain notation with exactly `scale` digits after the point. Work
    # on the magnitude only: Spark 4.3 miscomputes some negations of DECIMAL(38,0) (`-u - 1`).
    # The sign comes from the text too: `e >= 0` would widen e to a smaller scale (1E-38 >= 0).
    positive = "regexp_replace({hex}, '^(00)+(?=[0-7])', '')".format(hex=_hex128("dec_u"))
    # -m in two's complement is the bitwise complement of m - 1.
    complement = "translate({hex}, '0123456789ABCDEF', 'FEDCBA9876543210')".format(
        hex=_hex128("(dec_u - 1)")
    )
    negative = f"regexp_replace({complement}, '^(FF)+(?=[89A-F])', '')"
    body = (
        f"CASE WHEN dec_t NOT LIKE '-%' THEN base64(unhex({positive})) "
        f"ELSE base64(unhex({negative})) END"
    )
    magnitude = "CAST(translate(dec_t, '.-', '') AS DECIMAL(38,0))"
    return (
        f"CASE WHEN {e} IS NULL THEN NULL ELSE "
        f"{let(f'CAST({e} AS STRING)', 'dec_t', let(magnitude, 'dec_u', body))} END"
    )


def base64_to_decimal(e: str, precision: int, scale: int) -> str:
    """SQL: base64 of a big-endian two's-complement unscaled value (≤ 16 bytes) → DECIMAL(p,s),
    null when it is not base64, too long, or out of range."""
    # Sign-extended to 32 hex digits; a negative value's complemented digits are |value| - 1
    # (no negation: see `decimal_to_base64`).
    padded = "lpad(dec_h, 32, CASE WHEN dec_n THEN 'F' ELSE '0' END)"
    flipped = f"translate({padded}, '0123456789ABCDEF', 'FEDCBA9876543210')"
    digits = f"CASE WHEN dec_n THEN {flipped} ELSE {padded} END"
    hi = "CAST(conv(substr(dec_d, 1, 16), 16, 10) AS DECIMAL(38,0))"
    lo = "CAST(conv(substr(dec_d, 17, 16), 16, 10) AS DECIMAL(38,0))"
    value = f"try_add(try_multiply({hi}, {_TWO64}), {lo})"
    magnitude = f"CAST(CASE WHEN dec_n THEN try_add({value}, 1) ELSE {value} END AS STRING)"
    text = "dec_a"
    if scale:
        # lpad also cuts longer text: pad only up to the length the point needs.
        text = let(
            f"lpad(dec_a, greatest(length(dec_a), {scale + 1}), '0')",
            "dec_p",
            f"concat(substr(dec_p, 1, length(dec_p) - {scale}), '.', "
            f"substr(dec_p, length(dec_p) - {scale} + 1))",
        )
    signed = f"concat(CASE WHEN dec_n THEN '-' ELSE '' END, {text})"
    number = let(magnitude, "dec_a", f"try_cast({signed} AS DECIMAL({precision},{scale}))")
    unpacked = let(
        "hex(dec_b)",
        "dec_h",
        let("substr(dec_h, 1, 1) >= '8'", "dec_n", let(digits, "dec_d", number)),
    )
    checked = f"CASE WHEN length(dec_b) BETWEEN 1 AND 16 THEN {unpacked} END"
    return let(f"try_to_binary({e}, 'base64')", "dec_b", checked)

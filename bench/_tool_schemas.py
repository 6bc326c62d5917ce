"""Ten tool definitions of the kind agent clients send (OpenAI function tools, ``strict`` style): the
schemas ``bench/constrained_decoding.py`` compiles and samples against.

They cover what real tool schemas use: nested objects, arrays of objects, enums, string formats and
patterns, numeric bounds, optional fields, ``anyOf`` and ``additionalProperties: false``.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def _object(properties: Schema, required: list[str] | None = None) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


_STRING: Schema = {"type": "string"}
_DATE: Schema = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}

TOOLS: dict[str, Schema] = {
    "get_weather": _object(
        {
            "location": {"type": "string", "description": "City and country, e.g. Paris, France"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        ["location", "unit"],
    ),
    "search_flights": _object(
        {
            "origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "departure_date": _DATE,
            "return_date": {"anyOf": [_DATE, {"type": "null"}]},
            "passengers": _object(
                {
                    "adults": {"type": "integer", "minimum": 1, "maximum": 9},
                    "children": {"type": "integer", "minimum": 0, "maximum": 8},
                }
            ),
            "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business", "first"]},
        },
        ["origin", "destination", "departure_date", "passengers"],
    ),
    "send_email": _object(
        {
            "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
            "cc": {"type": "array", "items": {"type": "string", "format": "email"}},
            "subject": {"type": "string", "maxLength": 200},
            "body": _STRING,
            "importance": {"type": "string", "enum": ["low", "normal", "high"]},
        },
        ["to", "subject", "body"],
    ),
    "create_calendar_event": _object(
        {
            "title": _STRING,
            "start": {"type": "string", "format": "date-time"},
            "end": {"type": "string", "format": "date-time"},
            "attendees": {
                "type": "array",
                "items": _object(
                    {"email": {"type": "string", "format": "email"}, "optional": {"type": "boolean"}},
                    ["email"],
                ),
            },
            "reminder_minutes": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 5},
            "location": {"anyOf": [_STRING, {"type": "null"}]},
        },
        ["title", "start", "end"],
    ),
    "query_database": _object(
        {
            "table": {"type": "string", "enum": ["users", "orders", "products", "invoices"]},
            "columns": {"type": "array", "items": _STRING, "minItems": 1},
            "filters": {
                "type": "array",
                "items": _object(
                    {
                        "column": _STRING,
                        "op": {"type": "string", "enum": ["=", "!=", "<", "<=", ">", ">=", "like", "in"]},
                        "value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]},
                    }
                ),
            },
            "order_by": _STRING,
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        ["table", "columns"],
    ),
    "create_github_issue": _object(
        {
            "repo": {"type": "string", "pattern": r"^[\w.-]+/[\w.-]+$"},
            "title": {"type": "string", "minLength": 1, "maxLength": 256},
            "body": _STRING,
            "labels": {"type": "array", "items": _STRING},
            "assignees": {"type": "array", "items": _STRING},
            "milestone": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        ["repo", "title"],
    ),
    "book_restaurant": _object(
        {
            "restaurant_id": _STRING,
            "date": _DATE,
            "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"},
            "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
            "special_requests": _STRING,
            "contact": _object(
                {"name": _STRING, "phone": {"type": "string", "pattern": r"^\+?[0-9 ]{7,15}$"}}
            ),
        },
        ["restaurant_id", "date", "time", "party_size", "contact"],
    ),
    "convert_currency": _object(
        {
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "from_currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "to_currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        }
    ),
    "set_reminder": _object(
        {
            "text": _STRING,
            "when": {
                "anyOf": [
                    _object({"at": {"type": "string", "format": "date-time"}}),
                    _object(
                        {
                            "in_minutes": {"type": "integer", "minimum": 1},
                            "repeat": {"type": "string", "enum": ["never", "daily", "weekly"]},
                        }
                    ),
                ]
            },
        }
    ),
    "update_user_profile": _object(
        {
            "user_id": {"type": "integer", "minimum": 1},
            "display_name": {"type": "string", "minLength": 1, "maxLength": 64},
            "address": _object(
                {
                    "street": _STRING,
                    "city": _STRING,
                    "postal_code": _STRING,
                    "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
                },
                ["city", "country"],
            ),
            "preferences": _object(
                {
                    "newsletter": {"type": "boolean"},
                    "language": {"type": "string", "enum": ["en", "fr", "de", "es", "ja"]},
                    "theme": {"type": "string", "enum": ["light", "dark", "system"]},
                },
                [],
            ),
            "tags": {"type": "array", "items": _STRING, "maxItems": 20},
        },
        ["user_id"],
    ),
}

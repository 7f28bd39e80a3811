"""Clock: HomeAgent-style plugin with two tools.

- `clock_now`: the current time, optionally in an IANA time zone (zoneinfo);
- `clock_date_diff`: days between two dates, or a date plus/minus some days.

Errors come back the HomeAgent way: a dict with `isError: True` and `content`.
"""

from datetime import date, datetime, timedelta, timezone

from hearth_plugin import Plugin

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _zone(name):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not name or name.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise LookupError(f"unknown time zone {name!r} (use an IANA name like Asia/Shanghai)") from None


class ClockPlugin(Plugin):
    def name(self):
        return "clock"

    def start(self, sdk):
        sdk.register_tool("clock_now", {
            "description": "Current date and time, in UTC or in the given IANA time zone.",
            "parameters": {
                "type": "object",
                "properties": {
                    "timezone": {"type": "string",
                                 "description": "IANA time zone, e.g. Asia/Shanghai; default UTC"},
                },
            },
        }, self.now)
        sdk.register_tool("clock_date_diff", {
            "description": "Days from date `start` to date `end` (YYYY-MM-DD), "
                           "or the date `days` days after `start` when `end` is omitted.",
            "parameters": {
                "type": "object",
                "properties": {
                    "start": {"type": "string", "description": "Start date, YYYY-MM-DD"},
                    "end": {"type": "string", "description": "End date, YYYY-MM-DD"},
                    "days": {"type": "integer", "description": "Days to add to start (negative: subtract)"},
                },
                "required": ["start"],
            },
        }, self.date_diff)

    def stop(self):
        pass

    def now(self, args):
        try:
            tz = _zone(args.get("timezone"))
        except LookupError as e:
            return {"isError": True, "content": str(e)}
        now = datetime.now(tz)
        return {
            "iso": now.isoformat(timespec="seconds"),
            "timezone": args.get("timezone") or "UTC",
            "weekday": WEEKDAYS[now.weekday()],
            "unix": int(now.timestamp()),
        }

    def date_diff(self, args):
        try:
            start = date.fromisoformat(str(args["start"]))
            if args.get("end") is not None:
                end = date.fromisoformat(str(args["end"]))
                return {"start": start.isoformat(), "end": end.isoformat(), "days": (end - start).days}
            days = int(args.get("days", 0))
            result = start + timedelta(days=days)
        except (ValueError, OverflowError) as e:
            return {"isError": True, "content": f"bad date arithmetic: {e}"}
        return {"start": start.isoformat(), "days": days, "date": result.isoformat(),
                "weekday": WEEKDAYS[result.weekday()]}

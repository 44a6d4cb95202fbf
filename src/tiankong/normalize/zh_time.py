"""Chinese dates and clock times (``2021年3月5日``, ``下午3点15分``, ``晚上12点``): the date, the time, and the days a
clock moves its date on — ``None`` wherever the text leaves it open (fails closed, as every normaliser here)."""

from __future__ import annotations

import datetime as dt
import re

ZH_DATE = re.compile(r"^(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]?(.*)$")
ZH_TIME = re.compile(r"^\s*(上午|下午|晚上|早上|中午|凌晨)?\s*(\d{1,2})\s*[点时:]\s*(?:(\d{1,2}|半)\s*分?)?\s*"
                     r"(?:(\d{1,2})\s*秒)?\s*$")


def twelve_hour_only(clock: re.Match[str]) -> bool:
    """1点–12点 with no period of the day: spoken Chinese counts hours in twelves, so "3点开会" is 15:00 to most
    readers and 03:00 only to a clock. (0点, 15点, the formal 24-hour 8时30分 and a written 3:00 are read as given.)"""
    return clock[1] is None and 1 <= int(clock[2]) <= 12 and "点" in clock[0]


def zh_clock(clock: re.Match[str]) -> tuple[dt.time, int] | None:
    """A Chinese clock time and the days it moves its date on: 晚上12点 is midnight at the day's end (00:00, one
    day on), 凌晨12点 midnight at its start; 下午3点 is 15:00. None when the period and the hour leave it open:
    上午/早上/下午12点 (midnight to some readers, noon to others), 晚上1-5点 (after midnight, the next day?), a
    period the hour contradicts (上午15点), or 1-12点 with no period (``twelve_hour_only``)."""
    period, hour = clock[1], int(clock[2])
    day = 0
    if twelve_hour_only(clock):
        return None
    if period in ("上午", "早上", "凌晨"):
        if hour == 12 and period == "凌晨":
            hour = 0
        elif hour >= 12:
            return None
    elif period == "中午":
        if hour in (1, 2, 3):
            hour += 12
        elif hour not in (11, 12, 13, 14, 15):
            return None
    elif period == "下午":
        if 1 <= hour < 12:
            hour += 12
        elif hour < 13:
            return None
    elif period == "晚上":
        if hour == 12 or hour == 24:
            hour, day = 0, 1
        elif 6 <= hour < 12:
            hour += 12
        elif hour < 18:
            return None
    try:
        return dt.time(hour, 30 if clock[3] == "半" else int(clock[3] or 0), int(clock[4] or 0)), day
    except ValueError:
        return None


def zh_datetime(text: str) -> tuple[dt.date, dt.time | None, int] | None:
    """The date, the clock time (if any) and the days the clock moves the date on (晚上12点: 1)."""
    match = ZH_DATE.match(text)
    if not match:
        return None
    try:
        day = dt.date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None
    rest = match[4].strip()
    if not rest:
        return day, None, 0
    clock = ZH_TIME.match(rest)
    read = zh_clock(clock) if clock else None
    if read is None and clock and twelve_hour_only(clock) and int(clock[2]) < 12:
        return day, None, 0  # 3点: which 3 o'clock is open, not which day (12点 might be the midnight ending it)
    return None if read is None else (day, read[0], read[1])

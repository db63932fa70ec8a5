"""The instants a cron expression ticks at in a time zone: one set of instants,
whatever moment a walk starts from, forward or back.

cronsim reads the expression and walks wall-clock times (naive datetimes), where
it is exact; which instants a wall-clock time stands for is decided here, by the
rules of Debian cron, which cronsim follows:

- an expression with a fixed minute and hour (``30 2 * * *``; five fields) ticks
  once for each matching wall-clock time: at its first showing when the clocks
  fall back, and at the first minute after the jump when they spring forward
  over it (several times jumped over tick once);
- any other (``*/15 * * * *``, ``* 2 * * *``, six fields) ticks at each instant
  whose wall clock matches: twice in a repeated hour, never in a skipped one.

cronsim's own walk on aware datetimes gave, across a clock change, ticks that
depend on where it started: from Lord Howe's midnight ``* 2 * * *`` has no
02:00-02:29 on the night the clocks go back half an hour, from 01:59:59 it has
them; at Chatham ``*/15 3 * * *`` walks from that midnight for ever.

A look costs a few of cronsim's steps: the walk starts at the wall-clock time
of the moment it looks from, and in a repeated hour it walks that hour's times
once for each showing (the instant the clock goes back is found by bisection).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from cronsim import CronSim

_UTC = dt.UTC
_SECOND = dt.timedelta(seconds=1)
_MINUTE = dt.timedelta(minutes=1)
_MICRO = dt.timedelta(microseconds=1)
#: How far a walk looks for a tick before it gives up, as cronsim's own walk does:
#: an expression may match only times the clocks skip (``* 2 * 3 0L`` in Paris, each
#: minute of the hour the clocks jump over), and never tick.
HORIZON = dt.timedelta(days=366 * 50)


def _gave_up(resume: dt.datetime | None, since: dt.datetime, zone: dt.tzinfo) -> bool:
    """Whether a walk that found no tick since ``since`` (aware) and goes on at the
    wall-clock time ``resume`` has gone past :data:`HORIZON`, either way."""
    return resume is not None and abs(resume - _shown(since, zone)) > HORIZON


def fixed(cron: str) -> bool:
    """Whether ``cron`` has a fixed minute and hour (cronsim's test for Debian's rules)."""
    fields = cron.split()
    return len(fields) == 5 and not fields[0].startswith("*") and not fields[1].startswith("*")


def _both(wall: dt.datetime, zone: dt.tzinfo) -> tuple[dt.datetime, dt.datetime]:
    """``wall`` read with each offset around it (PEP 495's fold 0 and 1), in UTC."""
    return (
        wall.replace(tzinfo=zone, fold=0).astimezone(_UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(_UTC),
    )


def _shown(instant: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def instants(wall: dt.datetime, zone: dt.tzinfo, is_fixed: bool) -> list[dt.datetime]:
    """The instants (UTC, in order) a matching wall-clock time ``wall`` ticks at."""
    shown = [u for u in sorted(set(_both(wall, zone))) if _shown(u, zone) == wall]
    if not is_fixed:
        return shown
    if shown:
        return shown[:1]
    later = wall  # jumped over: as cronsim, the first whole minute after the jump
    while _shown(later.replace(tzinfo=zone).astimezone(_UTC), zone) != later:
        later += _MINUTE
    return [later.replace(tzinfo=zone, fold=0).astimezone(_UTC)]


def _repeat(wall: dt.datetime, zone: dt.tzinfo) -> dt.timedelta:
    """How long the clock repeats around ``wall`` (0 where it shows it once)."""
    first, second = _both(wall, zone)
    if _shown(first, zone) != wall:
        return dt.timedelta(0)  # jumped over
    return max(second - first, dt.timedelta(0))


def _jump(wall: dt.datetime, zone: dt.tzinfo) -> dt.datetime:
    """The instant the clock jumps at over ``wall``, a time it skips."""
    return _change(zone, *sorted(_both(wall, zone)))


def _change(zone: dt.tzinfo, low: dt.datetime, high: dt.datetime) -> dt.datetime:
    """The instant in (low, high] the offset changes at (``low`` before it)."""
    offset = low.astimezone(zone).utcoffset()
    while high - low > _MICRO:
        middle = low + (high - low) // 2
        if middle.astimezone(zone).utcoffset() == offset:
            low = middle
        else:
            high = middle
    return high


def _repeated(
    zone: dt.tzinfo, moment: dt.datetime
) -> tuple[dt.datetime, dt.timedelta, dt.datetime, dt.datetime] | None:
    """When ``moment`` is in a repeated hour: the instant the clock went back, by
    how much, and the stretch of wall-clock times shown twice [first, end)."""
    wall = _shown(moment, zone)
    back = _repeat(wall, zone)
    if not back:
        return None
    showing = moment.astimezone(zone).fold
    low = moment if showing == 0 else moment - back
    change = _change(zone, low, low + back)
    end = _shown(change - _MICRO, zone) + _MICRO
    return change, back, end - back, end


def after(cron: str, zone: dt.tzinfo, moment: dt.datetime) -> Iterator[dt.datetime]:
    """The ticks strictly after ``moment`` (aware), in order (UTC); they end where
    none comes for :data:`HORIZON`."""
    is_fixed, last, resume = fixed(cron), moment, None
    while True:
        if _gave_up(resume, last, zone):
            return
        repeated = None if is_fixed else _repeated(zone, last)
        if repeated and last.astimezone(zone).fold == 0:
            # The first showings of the repeated times ahead, then every second one.
            change, back, first, end = repeated
            yield from _showing(CronSim(cron, _shown(last, zone)), change - back, first, end)
            yield from _showing(CronSim(cron, first - _MICRO), change, first, end)
            last = change + back - _MICRO
            continue
        start, resume = resume or _since(last, zone, is_fixed), None
        for match in CronSim(cron, start):
            found = instants(match, zone, is_fixed)
            if not found:  # skipped (not fixed): on from the jump, not each time skipped
                resume = max(_shown(_jump(match, zone), zone) - _MICRO, match)
                break
            ahead = [t for t in found if t > last]
            if ahead:
                # Both showings of a repeated time ahead: from the first, as above.
                yield (last := ahead[0])
                if len(ahead) == 1:
                    continue
                break
        else:
            return


def at_or_before(cron: str, zone: dt.tzinfo, moment: dt.datetime) -> Iterator[dt.datetime]:
    """The ticks at or before ``moment`` (aware), newest first (UTC); they end where
    none came for :data:`HORIZON`."""
    is_fixed, bound, resume = fixed(cron), moment, None
    while True:
        if _gave_up(resume, bound, zone):
            return
        repeated = None if is_fixed else _repeated(zone, bound)
        if repeated and bound.astimezone(zone).fold == 1:
            # The second showings of the repeated times behind, then every first one.
            change, back, first, end = repeated
            yield from _showing(_back(cron, _shown(bound, zone)), change, first, end)
            yield from _showing(_back(cron, end - _MICRO), change - back, first, end)
            bound = change - back - _MICRO
            continue
        wall, resume = resume or _shown(bound, zone), None
        if is_fixed and bound.astimezone(zone).fold == 1:
            wall += _repeat(wall, zone)  # later times' first showings are behind
        for match in _back(cron, wall):
            found = instants(match, zone, is_fixed)
            if not found:  # skipped (not fixed): on from before the jump
                resume = min(_shown(_jump(match, zone) - _MICRO, zone), match - _MICRO)
                break
            behind = [t for t in found if t <= bound]
            if behind:
                # Both showings of a repeated time behind: from the second, as above.
                yield behind[-1]
                bound = behind[-1] - _MICRO
                if len(behind) == 1:
                    continue
                break
        else:
            return


def _since(last: dt.datetime, zone: dt.tzinfo, is_fixed: bool) -> dt.datetime:
    """The wall-clock time a forward walk from ``last`` starts at. A fixed expression
    looks a minute further back: a time a jump skipped ticks at the first whole minute
    after the jump, which is ahead of ``last`` though its wall time is behind, when
    the jump ends within a minute (Monrovia's 1972 jump to 00:44:30 ticks at 00:45)."""
    wall = _shown(last, zone)
    return min(wall, _shown(last - _MINUTE, zone)) if is_fixed else wall


def _showing(
    walk: Iterator[dt.datetime], since: dt.datetime, first: dt.datetime, end: dt.datetime
) -> Iterator[dt.datetime]:
    """The instants of ``walk``'s wall-clock times, while they are in the repeated
    stretch [first, end), in the showing of it that starts at ``since``."""
    for wall in walk:
        if not first <= wall < end:
            return
        yield since + (wall - first)


def _back(cron: str, wall: dt.datetime) -> Iterator[dt.datetime]:
    """cronsim's reverse walk, from ``wall`` included (naive)."""
    return CronSim(cron, wall if wall.microsecond else wall + _SECOND, reverse=True)

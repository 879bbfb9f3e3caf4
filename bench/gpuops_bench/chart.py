# Copyright: (c) 2026, gpuops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bench report's chart, as plain SVG from the results JSON: time to clean per method (median
bars, min-max whiskers, one group per server variant) and fleet wall time per node count (median
per configuration, min-max whiskers)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from .report import NAMES

WIDTH = 760
BAR_H, GAP, LABEL_W, PAD = 14, 4, 300, 16
COLORS = {"hand_a": "#b0b0b0", "hand_b": "#d0d0d0", "gpuops_adhoc": "#4c78a8", "stop_sglang": "#1f4e79",
          "stop_sglang_unbuffered": "#9ecae9", "gpuops_group": "#72b7b2", "recommended": "#1f4e79",
          "defaults": "#e45756"}
PALETTE = ("#f58518", "#54a24b", "#b279a2", "#9d755d", "#eeca3b")     # further fleet settings, in order
FONT = 'font-family="sans-serif" font-size="12"'


def _text(x, y, text, anchor="start", extra=""):
    return '<text x="%.1f" y="%.1f" text-anchor="%s" %s%s>%s</text>' % (x, y, anchor, FONT, extra, escape(str(text)))


def _ticks(top):
    """A round axis maximum at or above TOP and its tick step."""
    for step in (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500):
        if top / step <= 8:
            return step * max(1, -(-top // step)), step
    return top, top


def _stop_panel(stop, y0):
    """Horizontal bars; returns (svg elements, height)."""
    rows = []       # (variant, method, summary)
    for variant, methods in stop["variants"].items():
        for method, row in methods.items():
            rows.append((variant, method, row["seconds"]))
    values = [row[2]["max"] for row in rows if row[2]["max"] is not None] or [1]
    top, step = _ticks(max(values))
    plot_w = WIDTH - LABEL_W - 2 * PAD
    scale = plot_w / top
    out = [_text(PAD, y0 + 14, "Time to clean an 8-GPU node running SGLang at TP=8 (s, median, min-max)",
                 extra=' font-weight="bold"')]
    y = y0 + 30
    axis_top = y
    variant = None
    for v, method, s in rows:
        if v != variant:
            variant = v
            out.append(_text(PAD, y + 11, "%s server" % v.replace("_", " "), extra=' font-style="italic"'))
            y += BAR_H + GAP
        label = NAMES.get(method, method)
        out.append(_text(LABEL_W + PAD - 6, y + 11, label, anchor="end"))
        x0 = LABEL_W + PAD
        if s["median"] is None:
            out.append(_text(x0 + 4, y + 11, "not clean / not measured"))
        else:
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"/>' % (
                x0, y, s["median"] * scale, BAR_H, COLORS.get(method, "#888")))
            out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#000"/>' % (
                x0 + s["min"] * scale, x0 + s["max"] * scale, y + BAR_H / 2, y + BAR_H / 2))
            out.append(_text(x0 + s["max"] * scale + 4, y + 11, "%.2f" % s["median"]))
        y += BAR_H + GAP
    out += _axis_x(LABEL_W + PAD, axis_top, y, top, step, scale)
    return out, y + 24 - y0


def _axis_x(x0, top_y, bottom_y, top, step, scale):
    out = ['<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#000"/>' % (x0, x0 + top * scale, bottom_y, bottom_y)]
    tick = 0.0
    while tick <= top + 1e-9:
        x = x0 + tick * scale
        out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (x, x, top_y, bottom_y))
        out.append(_text(x, bottom_y + 14, ("%g" % tick), anchor="middle"))
        tick += step
    return out


def _fleet_panel(fleet, y0):
    """Median wall time per node count, one polyline per configuration; returns (elements, height)."""
    series = {}
    for row in fleet["rows"]:
        if row["wall_s"]["median"] is not None:
            series.setdefault(row["config"], []).append((row["nodes"], row["wall_s"]))
    sizes = sorted({point[0] for points in series.values() for point in points}) or [1]
    values = [point[1]["max"] for points in series.values() for point in points] or [1]
    top, step = _ticks(max(values))
    left, right, height = PAD + 50, WIDTH - PAD - 190, 220
    plot_top = y0 + 30
    bottom = plot_top + height
    out = [_text(PAD, y0 + 14, "Fleet: playbook wall time per node count (s, median, min-max)",
                 extra=' font-weight="bold"')]
    x_of = dict((n, left + (right - left) * i / max(1, len(sizes) - 1)) for i, n in enumerate(sizes))
    tick = 0.0
    while tick <= top + 1e-9:
        y = bottom - height * tick / top
        out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (left, right, y, y))
        out.append(_text(left - 6, y + 4, "%g" % tick, anchor="end"))
        tick += step
    for n, x in x_of.items():
        out.append(_text(x, bottom + 16, "%d node%s" % (n, "" if n == 1 else "s"), anchor="middle"))
    legend_y = plot_top + 10
    others = iter(PALETTE * 3)
    for config, points in sorted(series.items()):
        color = COLORS.get(config) or next(others)
        points.sort()
        coords = [(x_of[n], bottom - height * s["median"] / top) for n, s in points]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            color, " ".join("%.1f,%.1f" % c for c in coords)))
        for (n, s), (x, y) in zip(points, coords):
            out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s"/>' % (
                x, x, bottom - height * s["min"] / top, bottom - height * s["max"] / top, color))
            out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (x, y, color))
            out.append(_text(x + 6, y - 6, "%.1f" % s["median"]))
        out.append('<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>' % (right + 20, legend_y - 10, color))
        out.append(_text(right + 38, legend_y, config))
        legend_y += 18
    return out, bottom + 30 - y0


def svg(results):
    """The chart as an SVG document (str); panels for the measurements present in RESULTS."""
    body, y = [], 0
    if results.get("stop"):
        elements, height = _stop_panel(results["stop"], y)
        body += elements
        y += height
    if results.get("fleet") and results["fleet"].get("rows"):
        elements, height = _fleet_panel(results["fleet"], y)
        body += elements
        y += height
    if not body:
        body.append(_text(PAD, 20, "no stop or fleet results"))
        y = 30
    date = results.get("meta", {}).get("date", "")
    body.append(_text(WIDTH - PAD, y + 4, "make bench, %s" % date, anchor="end", extra=' fill="#666"'))
    height = y + 12
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">\n'
            '<rect width="100%%" height="100%%" fill="#fff"/>\n%s\n</svg>\n' % (WIDTH, height, WIDTH, height, "\n".join(body)))

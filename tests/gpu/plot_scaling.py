#!/usr/bin/env python3
"""scaling.jsonl (tests/gpu/issue21_scaling.sh) -> an SVG with two panels: tokens/s against the
sample length (at 16384 tokens a step) and against the step budget (at 512-token samples), one
line per model shape and peer (ours solid, HF dashed). No plotting library: the SVG is written
by hand so that the figure can be made anywhere python3 runs."""
import json
import math
import sys

COLORS = {"llama3_8b": "#1f77b4", "deepseek_v2_lite_shape": "#d62728", "kimi_k2_3layer": "#2ca02c"}
W, H, PAD_L, PAD_B, PAD_T, PANEL_W = 980, 420, 70, 60, 40, 400


def main(src, dst):
    points = [json.loads(l) for l in open(src) if l.strip()]
    points = [p for p in points if p.get("tokens_per_s")]
    top = max(p["tokens_per_s"] for p in points) * 1.1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    for panel, (sweep, xlabel, xof) in enumerate([
            ("length", "sample length, tokens (16384 tokens a step)", lambda p: p["seq"]),
            ("budget", "tokens a step (512-token samples)", lambda p: p["seq"] * p["batch"])]):
        x0 = PAD_L + panel * (PANEL_W + 90)
        y0 = H - PAD_B
        ps = [p for p in points if p["sweep"] == sweep]
        if not ps:
            continue
        xs = sorted({xof(p) for p in ps})
        lo, hi = math.log2(xs[0]), math.log2(xs[-1])
        X = lambda v: x0 + (math.log2(v) - lo) / max(hi - lo, 1e-9) * PANEL_W
        Y = lambda v: y0 - v / top * (y0 - PAD_T)
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0 + PANEL_W}" y2="{y0}" stroke="black"/>')
        out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{PAD_T}" stroke="black"/>')
        for v in xs:
            out.append(f'<text x="{X(v):.1f}" y="{y0 + 16}" text-anchor="middle">{v}</text>')
        for k in range(6):
            v = top / 1.1 * k / 5
            out.append(f'<text x="{x0 - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v / 1000:.0f}k</text>')
            out.append(f'<line x1="{x0}" y1="{Y(v):.1f}" x2="{x0 + PANEL_W}" y2="{Y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 + PANEL_W / 2}" y="{H - 20}" text-anchor="middle">{xlabel}</text>')
        out.append(f'<text x="{x0 - 50}" y="{PAD_T - 14}">tokens/s</text>')
        for cfg in sorted({p["config"] for p in ps}):
            for peer in ("ours", "hf"):
                line = sorted((xof(p), p["tokens_per_s"]) for p in ps if p["config"] == cfg and p["peer"] == peer)
                if not line:
                    continue
                dash = '' if peer == "ours" else ' stroke-dasharray="6 4"'
                path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in line)
                out.append(f'<polyline points="{path}" fill="none" stroke="{COLORS.get(cfg, "black")}" stroke-width="2"{dash}>'
                           f'<title>{cfg} {peer}</title></polyline>')
                for x, y in line:
                    out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3" fill="{COLORS.get(cfg, "black")}" '
                               f'data-config="{cfg}" data-peer="{peer}" data-x="{x}" data-tokens-per-s="{y}"/>')
    legend_y = 14
    for i, cfg in enumerate(sorted({p["config"] for p in points})):
        for j, peer in enumerate(("ours", "hf")):
            lx = PAD_L + (2 * i + j) * 200
            dash = '' if peer == "ours" else ' stroke-dasharray="6 4"'
            out.append(f'<line x1="{lx}" y1="{legend_y}" x2="{lx + 30}" y2="{legend_y}" stroke="{COLORS.get(cfg, "black")}" stroke-width="2"{dash}/>')
            out.append(f'<text x="{lx + 36}" y="{legend_y + 4}">{cfg} {"eagle3_extract" if peer == "ours" else "HF"}</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

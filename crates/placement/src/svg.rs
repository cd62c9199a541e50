// Over 600 lines: 597 lines of code; the rest are its unit tests, kept beside it.
//! The topology as a picture: an SVG of regions, zones and nodes as nested
//! boxes with each member a mark coloured by shard and labelled `s/m`,
//! primaries drawn solid, domains over a limit and unplaced members in red,
//! and a legend. Where nodes are too many to draw (more than
//! [`MAX_NODES_DRAWN`], or more members on a node than a box holds) it draws
//! a shard x zone grid instead: one row per shard, one column per zone, the
//! count of the shard's members in each cell.
//!
//! Pure and deterministic (the same input gives the same bytes), so a
//! snapshot pins it. [`Picture`] is the plain data both the plan (`plan
//! --output svg`) and a live cluster's status (`topology --output svg`) fill.

use crate::model::{Plan, Problem, REGION_KEY, ZONE_KEY};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Beyond this many nodes the picture is the shard x zone grid.
pub const MAX_NODES_DRAWN: usize = 60;
/// Beyond this many members on one node the picture is the grid.
const MAX_MARKS_PER_NODE: usize = 24;

/// One member as the picture shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub shard: u32,
    pub member: u32,
    pub primary: bool,
    /// The member sits in a domain that holds more of its shard than a
    /// constraint allows.
    pub violated: bool,
}

/// One node and the members on it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeBox {
    pub name: String,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub marks: Vec<Mark>,
}

/// What the picture shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Picture {
    /// The first line (e.g. `cluster demo: 3 shards x 3 members`).
    pub title: String,
    /// Further lines under it (constraints, the state).
    pub notes: Vec<String>,
    pub shards: u32,
    pub nodes: Vec<NodeBox>,
    /// Members with no node (unplaced, or Pending), with the reason.
    pub unplaced: Vec<(Mark, String)>,
    /// Domains over a limit: (topology key, domain value).
    pub violated_domains: Vec<(String, Option<String>)>,
}

impl Picture {
    /// The picture of a plan.
    pub fn of_plan(problem: &Problem, plan: &Plan) -> Picture {
        let members_per_shard = problem.replicas + 1;
        let mut notes: Vec<String> = problem
            .constraints
            .iter()
            .map(crate::render::constraint_text)
            .collect();
        notes.push(format!(
            "{} placed, {} unplaced, {} Preferred violations",
            plan.members.len(),
            plan.unplaced.len(),
            plan.violations.len()
        ));
        let violated: Vec<(u32, String, Option<String>)> = plan
            .violations
            .iter()
            .map(|v| (v.shard, v.topology_key.clone(), v.domain.clone()))
            .collect();
        let mut nodes: Vec<NodeBox> = problem
            .nodes
            .iter()
            .map(|n| NodeBox {
                name: n.name.clone(),
                region: n.labels.get(REGION_KEY).cloned(),
                zone: n.labels.get(ZONE_KEY).cloned(),
                marks: Vec::new(),
            })
            .collect();
        for m in &plan.members {
            let is_violated = violated.iter().any(|(shard, key, domain)| {
                *shard == m.shard && m.domains.get(key).is_some_and(|d| d == domain)
            });
            let mark = Mark {
                shard: m.shard,
                member: m.member,
                primary: m.primary,
                violated: is_violated,
            };
            match nodes.iter_mut().find(|n| n.name == m.node) {
                Some(n) => n.marks.push(mark),
                None => nodes.push(NodeBox {
                    name: m.node.clone(),
                    marks: vec![mark],
                    ..NodeBox::default()
                }),
            }
        }
        let unplaced = plan
            .unplaced
            .iter()
            .map(|u| {
                let primary = problem.primaries.get(&u.shard).copied().unwrap_or(0) == u.member;
                let mark = Mark {
                    shard: u.shard,
                    member: u.member,
                    primary,
                    violated: true,
                };
                (mark, u.reason.clone())
            })
            .collect();
        let mut violated_domains: Vec<(String, Option<String>)> = plan
            .violations
            .iter()
            .map(|v| (v.topology_key.clone(), v.domain.clone()))
            .collect();
        violated_domains.sort();
        violated_domains.dedup();
        Picture {
            title: format!(
                "cluster {}: {} shards x {} members",
                plan.cluster, problem.shards, members_per_shard
            ),
            notes,
            shards: problem.shards,
            nodes,
            unplaced,
            violated_domains,
        }
    }

    /// Whether the nested boxes fit, else the shard x zone grid.
    fn boxes_fit(&self) -> bool {
        self.nodes.len() <= MAX_NODES_DRAWN
            && self
                .nodes
                .iter()
                .all(|n| n.marks.len() <= MAX_MARKS_PER_NODE)
    }

    fn domain_violated(&self, key: &str, value: &Option<String>) -> bool {
        self.violated_domains
            .iter()
            .any(|(k, v)| k == key && v == value)
    }
}

/// Compares names so that embedded numbers sort by value: `node-2` before
/// `node-10`. (Written here: a dozen lines did not justify a crate.)
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (trim_zeros(&a[..da]), trim_zeros(&b[..db]));
                let by_value = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if by_value != Ordering::Equal {
                    return by_value;
                }
                (a, b) = (&a[da..], &b[db..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                (a, b) = (&a[1..], &b[1..]);
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|c| **c == b'0').count();
    &digits[zeros..]
}

fn natural_opt(a: &Option<String>, b: &Option<String>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => natural_cmp(a, b),
        // Unlabelled groups last.
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// A colour per shard: hues a golden angle apart, so neighbours differ.
fn shard_colour(shard: u32) -> String {
    let hue = (u64::from(shard) * 137_508 / 1000) % 360;
    format!("hsl({hue},62%,48%)")
}

const RED: &str = "#d62728";

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

const FONT: &str = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";
const MARK_W: u32 = 46;
const MARK_H: u32 = 20;
const MARKS_PER_ROW: u32 = 4;
const NODE_W: u32 = MARKS_PER_ROW * (MARK_W + 4) + 12;
const PAD: u32 = 10;

/// One region's zones, each with its nodes, in natural order.
type Tree<'a> = Vec<(Option<String>, Vec<(Option<String>, Vec<&'a NodeBox>)>)>;

fn tree(nodes: &[NodeBox]) -> Tree<'_> {
    let mut sorted: Vec<&NodeBox> = nodes.iter().collect();
    sorted.sort_by(|a, b| {
        natural_opt(&a.region, &b.region)
            .then_with(|| natural_opt(&a.zone, &b.zone))
            .then_with(|| natural_cmp(&a.name, &b.name))
    });
    let mut out: Tree = Vec::new();
    for n in sorted {
        if out.last().is_none_or(|(r, _)| *r != n.region) {
            out.push((n.region.clone(), Vec::new()));
        }
        if let Some((_, zones)) = out.last_mut() {
            if zones.last().is_none_or(|(z, _)| *z != n.zone) {
                zones.push((n.zone.clone(), Vec::new()));
            }
            if let Some((_, list)) = zones.last_mut() {
                list.push(n);
            }
        }
    }
    out
}

fn node_height(n: &NodeBox) -> u32 {
    let rows = (n.marks.len() as u32).div_ceil(MARKS_PER_ROW).max(1);
    22 + rows * (MARK_H + 4) + 4
}

fn mark_svg(out: &mut String, x: u32, y: u32, m: &Mark) {
    let colour = shard_colour(m.shard);
    let (fill, text, stroke) = if m.primary {
        (colour.as_str(), "#ffffff", colour.as_str())
    } else {
        ("#ffffff", colour.as_str(), colour.as_str())
    };
    let stroke = if m.violated { RED } else { stroke };
    let width = if m.violated { 3 } else { 2 };
    let role = if m.primary { "primary" } else { "replica" };
    let _ = write!(
        out,
        "<g><title>shard {} member {} {role}</title><rect x=\"{x}\" y=\"{y}\" width=\"{MARK_W}\" height=\"{MARK_H}\" rx=\"4\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{width}\"/>",
        m.shard, m.member
    );
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"11\" text-anchor=\"middle\" fill=\"{text}\">{}/{}</text></g>",
        x + MARK_W / 2,
        y + 14,
        m.shard,
        m.member
    );
}

/// The picture as an SVG document.
pub fn render_svg(picture: &Picture) -> String {
    let mut body = String::new();
    let mut y = PAD;
    let mut width = 640u32;
    let _ = writeln!(
        body,
        "<text x=\"{PAD}\" y=\"{}\" {FONT} font-size=\"16\" font-weight=\"bold\">{}</text>",
        y + 14,
        escape(&picture.title)
    );
    y += 22;
    for note in &picture.notes {
        let _ = writeln!(
            body,
            "<text x=\"{PAD}\" y=\"{}\" {FONT} font-size=\"12\" fill=\"#444444\">{}</text>",
            y + 12,
            escape(note)
        );
        y += 16;
    }
    y += 8;
    let (drawn_w, drawn_h) = if picture.boxes_fit() {
        boxes(&mut body, picture, y)
    } else {
        grid(&mut body, picture, y)
    };
    width = width.max(drawn_w + 2 * PAD);
    y += drawn_h + 12;
    if !picture.unplaced.is_empty() {
        let _ = writeln!(
            body,
            "<text x=\"{PAD}\" y=\"{}\" {FONT} font-size=\"13\" font-weight=\"bold\" fill=\"{RED}\">unplaced</text>",
            y + 12
        );
        y += 18;
        for (mark, reason) in &picture.unplaced {
            mark_svg(&mut body, PAD, y, mark);
            let _ = writeln!(
                body,
                "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"12\" fill=\"{RED}\">{}</text>",
                PAD + MARK_W + 8,
                y + 14,
                escape(reason)
            );
            y += MARK_H + 6;
        }
        y += 6;
    }
    y += legend(&mut body, picture, y);
    let height = y + PAD;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">"
    );
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>"
    );
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// Regions stacked, zones side by side in a region, nodes stacked in a zone.
/// Returns the size drawn.
fn boxes(out: &mut String, picture: &Picture, top: u32) -> (u32, u32) {
    let mut y = top;
    let mut max_w = 0;
    for (region, zones) in tree(&picture.nodes) {
        let zone_w = NODE_W + 2 * PAD;
        let zone_h = zones
            .iter()
            .map(|(_, nodes)| 24 + nodes.iter().map(|n| node_height(n) + 6).sum::<u32>() + 4)
            .max()
            .unwrap_or(0);
        let region_w = zones.len() as u32 * (zone_w + PAD) + PAD;
        let region_h = 26 + zone_h + PAD;
        let region_red = picture.domain_violated(REGION_KEY, &region);
        let _ = writeln!(
            out,
            "<rect x=\"{PAD}\" y=\"{y}\" width=\"{region_w}\" height=\"{region_h}\" rx=\"8\" fill=\"#f4f6f8\" stroke=\"{}\" stroke-width=\"{}\"/>",
            if region_red { RED } else { "#8a949e" },
            if region_red { 3 } else { 1 }
        );
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"13\" font-weight=\"bold\">region {}</text>",
            PAD + 8,
            y + 17,
            escape(region.as_deref().unwrap_or("(no region label)"))
        );
        let mut x = PAD + PAD;
        for (zone, nodes) in &zones {
            let zy = y + 26;
            let zone_red = picture.domain_violated(ZONE_KEY, zone);
            let _ = writeln!(
                out,
                "<rect x=\"{x}\" y=\"{zy}\" width=\"{zone_w}\" height=\"{zone_h}\" rx=\"6\" fill=\"#ffffff\" stroke=\"{}\" stroke-width=\"{}\"/>",
                if zone_red { RED } else { "#b0b8c0" },
                if zone_red { 3 } else { 1 }
            );
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"12\" font-weight=\"bold\">zone {}</text>",
                x + 8,
                zy + 16,
                escape(zone.as_deref().unwrap_or("(no zone label)"))
            );
            let mut ny = zy + 24;
            for n in nodes {
                let h = node_height(n);
                let node_red = picture.domain_violated(crate::HOSTNAME_KEY, &Some(n.name.clone()));
                let _ = writeln!(
                    out,
                    "<rect x=\"{}\" y=\"{ny}\" width=\"{NODE_W}\" height=\"{h}\" rx=\"4\" fill=\"#fafbfc\" stroke=\"{}\" stroke-width=\"{}\"/>",
                    x + PAD,
                    if node_red { RED } else { "#d0d6dc" },
                    if node_red { 3 } else { 1 }
                );
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"11\" fill=\"#333333\">{}</text>",
                    x + PAD + 6,
                    ny + 15,
                    escape(&n.name)
                );
                let mut marks: Vec<&Mark> = n.marks.iter().collect();
                marks.sort_by_key(|m| (m.shard, m.member));
                for (i, m) in marks.iter().enumerate() {
                    let i = i as u32;
                    let mx = x + PAD + 6 + (i % MARKS_PER_ROW) * (MARK_W + 4);
                    let my = ny + 22 + (i / MARKS_PER_ROW) * (MARK_H + 4);
                    mark_svg(out, mx, my, m);
                }
                ny += h + 6;
            }
            x += zone_w + PAD;
        }
        max_w = max_w.max(region_w);
        y += region_h + PAD;
    }
    (max_w, y - top)
}

/// One row per shard, one column per zone (grouped by region): the number of
/// the shard's members in the zone, the primary's zone marked, cells over a
/// zone or region limit in red.
fn grid(out: &mut String, picture: &Picture, top: u32) -> (u32, u32) {
    let mut columns: Vec<(Option<String>, Option<String>)> = Vec::new();
    for (region, zones) in tree(&picture.nodes) {
        for (zone, _) in zones {
            columns.push((region.clone(), zone));
        }
    }
    let mut cells: BTreeMap<(u32, usize), (u32, bool, bool)> = BTreeMap::new();
    for n in &picture.nodes {
        let Some(col) = columns
            .iter()
            .position(|(r, z)| *r == n.region && *z == n.zone)
        else {
            continue;
        };
        for m in &n.marks {
            let cell = cells.entry((m.shard, col)).or_default();
            cell.0 += 1;
            cell.1 |= m.primary;
            cell.2 |= m.violated;
        }
    }
    let (label_w, cell_w, cell_h) = (70u32, 64u32, 18u32);
    let grid_w = label_w + columns.len() as u32 * cell_w;
    let mut y = top;
    let _ = writeln!(
        out,
        "<text x=\"{PAD}\" y=\"{}\" {FONT} font-size=\"11\" fill=\"#444444\">{} nodes: members of each shard per zone (a filled cell holds the primary)</text>",
        y + 11,
        picture.nodes.len()
    );
    y += 18;
    for (i, (region, zone)) in columns.iter().enumerate() {
        let x = PAD + label_w + i as u32 * cell_w;
        let red = picture.domain_violated(ZONE_KEY, zone);
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"10\" text-anchor=\"middle\" fill=\"{}\">{}</text>",
            x + cell_w / 2,
            y + 10,
            if red { RED } else { "#222222" },
            escape(zone.as_deref().unwrap_or("(no zone)"))
        );
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"9\" text-anchor=\"middle\" fill=\"#666666\">{}</text>",
            x + cell_w / 2,
            y + 21,
            escape(region.as_deref().unwrap_or("(no region)"))
        );
    }
    y += 26;
    for shard in 0..picture.shards {
        let colour = shard_colour(shard);
        let _ = writeln!(
            out,
            "<text x=\"{PAD}\" y=\"{}\" {FONT} font-size=\"10\" fill=\"{colour}\">shard {shard}</text>",
            y + 13
        );
        for col in 0..columns.len() {
            let x = PAD + label_w + col as u32 * cell_w;
            let (count, primary, violated) = cells.get(&(shard, col)).copied().unwrap_or_default();
            let fill = if primary { colour.as_str() } else { "#ffffff" };
            let stroke = if violated { RED } else { "#d0d6dc" };
            let _ = writeln!(
                out,
                "<rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{}\"/>",
                cell_w - 2,
                cell_h - 2,
                if violated { 2 } else { 1 }
            );
            if count > 0 {
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"10\" text-anchor=\"middle\" fill=\"{}\">{count}</text>",
                    x + cell_w / 2,
                    y + 12,
                    if primary { "#ffffff" } else { colour.as_str() }
                );
            }
        }
        y += cell_h;
    }
    (grid_w, y - top)
}

/// The legend: what a mark, a solid mark and red mean, and the shard colours.
fn legend(out: &mut String, picture: &Picture, top: u32) -> u32 {
    let mut y = top;
    let _ = writeln!(
        out,
        "<text x=\"{PAD}\" y=\"{}\" {FONT} font-size=\"12\" font-weight=\"bold\">legend</text>",
        y + 12
    );
    y += 18;
    let examples = [
        (
            Mark {
                shard: 0,
                member: 0,
                primary: true,
                violated: false,
            },
            "primary (shard/member)",
        ),
        (
            Mark {
                shard: 0,
                member: 1,
                primary: false,
                violated: false,
            },
            "replica",
        ),
        (
            Mark {
                shard: 0,
                member: 2,
                primary: false,
                violated: true,
            },
            "red: over a constraint's limit, or unplaced",
        ),
    ];
    for (mark, text) in &examples {
        mark_svg(out, PAD, y, mark);
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" {FONT} font-size=\"11\">{}</text>",
            PAD + MARK_W + 8,
            y + 14,
            escape(text)
        );
        y += MARK_H + 4;
    }
    // One swatch per shard, up to a line's worth; beyond, the rule.
    let shown = picture.shards.min(16);
    let mut x = PAD;
    for shard in 0..shown {
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" {FONT} font-size=\"10\">shard {shard}</text>",
            y + 3,
            shard_colour(shard),
            x + 16,
            y + 13
        );
        x += 64;
    }
    if picture.shards > shown {
        let _ = writeln!(
            out,
            "<text x=\"{x}\" y=\"{}\" {FONT} font-size=\"10\">... one colour per shard ({} shards)</text>",
            y + 13,
            picture.shards
        );
    }
    y += 20;
    y - top
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_naturally() {
        let mut names = vec!["node-10", "node-2", "node-1", "node-02b", "node-2a", "a"];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            vec!["a", "node-1", "node-2", "node-2a", "node-02b", "node-10"]
        );
        assert_eq!(natural_cmp("zone-1a", "zone-1a"), Ordering::Equal);
        assert_eq!(natural_cmp("n9", "n10"), Ordering::Less);
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn shard_colours_differ_for_neighbours() {
        let colours: Vec<String> = (0..8).map(shard_colour).collect();
        for pair in colours.windows(2) {
            assert_ne!(pair[0], pair[1]);
        }
    }
}

package layout

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// mapHeading is the README's section for engineers, and packagesHeading its list of packages,
// which must name every package of the module. A mention elsewhere in the map (where a
// behaviour lives) does not count: the list is what a reader scans for a package. The headings
// are part of this test's contract: rename them here and in the README together.
const (
	mapHeading      = "## For engineers"
	packagesHeading = "### The packages"
)

// treePrefixes are the top-level folders of the tree. A code span whose first word starts with
// one of them names a path, which must exist; other code spans (flags, labels, commands) are
// not paths and are left alone.
var treePrefixes = []string{"apiserver/", "controller/", "plugin/", "sidecars/", "hack/", "artifacts/", "test/"}

// clientsetRoot is where the generated clientset starts: the map names it, and what is below it
// (fake, scheme, typed clients) is generated along with it and needs no line of its own.
const clientsetRoot = "apiserver/pkg/generated/clientset/versioned"

// reference is a path or a destination the README names.
type reference struct {
	Line   int    // 1-based, in the README
	Target string // a link's destination as written, or a code span's first word
	Link   bool   // a Markdown link or image; false for a code span naming a path of the tree
}

var (
	codeSpanRE = regexp.MustCompile("`[^`]+`")
	// inlineLinkRE finds the destination of every inline link and image, "[text](dest "title")".
	// Link text may hold anything, so only the "](" that opens a destination is looked for.
	inlineLinkRE = regexp.MustCompile(`\]\(\s*<?([^\s)>]*)`)
	// refDefRE is a reference definition, "[label]: dest".
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]*)`)
	// htmlLinkRE is an href or src attribute of inline HTML.
	htmlLinkRE = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	// headingLinkRE is a link in a heading, whose anchor holds only the link's text.
	headingLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	schemeRE      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// markdownLines calls fn with every line of markdown outside fenced code blocks, whose content
// is code, not links or names of the tree.
func markdownLines(markdown string, fn func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(markdown, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		fn(i+1, line)
	}
}

// references lists the link destinations of markdown and the code spans that name a path of
// the tree, in order. A code span's "](" is code, not a link, so spans are blanked before links
// are looked for; a link's text may still be a code span ([`pkg`](pkg) yields both).
func references(markdown string) []reference {
	var refs []reference
	markdownLines(markdown, func(n int, line string) {
		for _, span := range codeSpanRE.FindAllString(line, -1) {
			fields := strings.Fields(strings.Trim(span, "`"))
			if len(fields) == 0 {
				continue
			}
			word := strings.TrimPrefix(fields[0], "./")
			for _, p := range treePrefixes {
				if strings.HasPrefix(word, p) {
					refs = append(refs, reference{Line: n, Target: word})
					break
				}
			}
		}
		rest := codeSpanRE.ReplaceAllStringFunc(line, func(s string) string { return strings.Repeat("x", len(s)) })
		for _, re := range []*regexp.Regexp{refDefRE, inlineLinkRE, htmlLinkRE} {
			for _, m := range re.FindAllStringSubmatch(rest, -1) {
				refs = append(refs, reference{Line: n, Target: m[1], Link: true})
			}
		}
	})
	return refs
}

// headingAnchors are the fragments that link to the headings of markdown, made as GitHub makes
// them: lower case, punctuation dropped, spaces as hyphens, "-1", "-2" on repeats.
func headingAnchors(markdown string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	markdownLines(markdown, func(_ int, line string) {
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			return
		}
		text := headingLinkRE.ReplaceAllString(m[2], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if k := seen[slug]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	})
	return anchors
}

// repoPath is the repository-relative path a reference names, cleaned, and whether it names one
// (web links and fragments do not).
func repoPath(ref reference) (string, bool) {
	t := ref.Target
	if ref.Link {
		if t == "" || strings.HasPrefix(t, "#") || schemeRE.MatchString(t) {
			return "", false
		}
		t, _, _ = strings.Cut(t, "#")
		t, _, _ = strings.Cut(t, "?")
		if u, err := url.PathUnescape(t); err == nil {
			t = u
		}
	}
	return path.Clean(t), true
}

// checkReference says what is wrong with ref, "" when nothing is. A link may go to the web
// (http, https), to a heading of the README, or to a path of the repository that exists; a
// code span naming a path of the tree must name one that exists. Nothing may point outside the
// repository: a reader of a clone, or of the repository's web page, has nothing else.
func checkReference(ref reference, exists func(string) bool, anchors map[string]bool) string {
	t := ref.Target
	if ref.Link {
		switch {
		case t == "":
			return "a link with no destination"
		case strings.HasPrefix(t, "http://"), strings.HasPrefix(t, "https://"):
			return ""
		case strings.HasPrefix(t, "#"):
			if !anchors[strings.TrimPrefix(t, "#")] {
				return fmt.Sprintf("link to %s, which is no heading of README.md", t)
			}
			return ""
		case schemeRE.MatchString(t), strings.HasPrefix(t, "/"), strings.HasPrefix(t, `\`):
			return fmt.Sprintf("link to %s leaves the repository; only http(s) links may point outside it", t)
		}
	}
	p, _ := repoPath(ref)
	if p == ".." || strings.HasPrefix(p, "../") {
		if ref.Link {
			return fmt.Sprintf("link to %s leaves the repository; only http(s) links may point outside it", t)
		}
		return fmt.Sprintf("`%s` leaves the repository", t)
	}
	if !exists(p) {
		if ref.Link {
			return fmt.Sprintf("link to %s, which is not in the tree", t)
		}
		return fmt.Sprintf("`%s` is not in the tree", t)
	}
	return ""
}

// section is the part of markdown under heading, up to the next heading of its level or
// above, and the README lines it spans.
func section(markdown, heading string) (text string, first, last int, ok bool) {
	level := strings.Count(strings.Fields(heading)[0], "#")
	lines := strings.Split(markdown, "\n")
	markdownLines(markdown, func(n int, line string) {
		if m := headingRE.FindStringSubmatch(line); m != nil {
			switch {
			case first == 0 && strings.TrimSpace(line) == heading:
				first = n
				return
			case first != 0 && last == 0 && len(m[1]) <= level:
				last = n - 1
			}
		}
	})
	if first == 0 {
		return "", 0, 0, false
	}
	if last == 0 {
		// It runs to the end, or to the end of what is left of a section already cut out.
		last = len(lines)
		for last > first && strings.TrimSpace(lines[last-1]) == "" {
			last--
		}
	}
	// Line numbers of the section's references stay the README's: the lines before it are blank.
	var body []string
	for i := range lines {
		if i+1 > first && i+1 <= last {
			body = append(body, lines[i])
		} else {
			body = append(body, "")
		}
	}
	return strings.Join(body, "\n"), first, last, true
}

// exempt are the packages the map need not name: the generated clientset's own packages below
// its root, and test support (a /testing folder, or a name ending in "test").
func exempt(pkg string) bool {
	return strings.HasPrefix(pkg, clientsetRoot+"/") || strings.Contains(pkg, "/testing") || strings.HasSuffix(pkg, "test")
}

// unmapped are the packages of pkgs that named does not name, nor cover: a named package covers
// the packages below it. A named folder that is no package (`controller/`, `controller/pkg`)
// covers nothing, or one link to an area would vouch for every package in it.
func unmapped(pkgs []string, named map[string]bool) []string {
	isPkg := map[string]bool{}
	for _, p := range pkgs {
		isPkg[p] = true
	}
	var out []string
	for _, p := range pkgs {
		if exempt(p) || named[p] {
			continue
		}
		covered := false
		for dir := path.Dir(p); dir != "." && !covered; dir = path.Dir(dir) {
			covered = named[dir] && isPkg[dir]
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// namedPaths are the repository paths the references name.
func namedPaths(refs []reference) map[string]bool {
	named := map[string]bool{}
	for _, r := range refs {
		if p, ok := repoPath(r); ok {
			named[p] = true
		}
	}
	return named
}

func readREADME(t *testing.T) (root, text string) {
	t.Helper()
	root = repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return root, string(data)
}

// Every link of the README and every path it names in code stays in the repository and exists.
func TestReadmeReferences(t *testing.T) {
	root, text := readREADME(t)
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		return err == nil
	}
	anchors := headingAnchors(text)
	for _, ref := range references(text) {
		if problem := checkReference(ref, exists, anchors); problem != "" {
			t.Errorf("README.md:%d: %s", ref.Line, problem)
		}
	}
}

// Every package of the module is in the list of packages of the README's map for engineers.
func TestReadmeMapsEveryPackage(t *testing.T) {
	_, text := readREADME(t)
	mapText, _, _, ok := section(text, mapHeading)
	if !ok {
		t.Fatalf("README.md has no section %q: it is the map for engineers, which names every package of the module", mapHeading)
	}
	list, first, last, ok := section(mapText, packagesHeading)
	if !ok {
		t.Fatalf("README.md's section %q has no %q: the list that names every package of the module", mapHeading, packagesHeading)
	}
	var pkgs []string
	for p := range modulePackages(t) {
		pkgs = append(pkgs, p)
	}
	for _, p := range unmapped(pkgs, namedPaths(references(list))) {
		t.Errorf("package %s is not in the map's list of packages (README.md:%d-%d, %q): add it with a line on what it owns, as [`%s`](%s)",
			p, first, last, packagesHeading, p, p)
	}
}

// Kinds of problems checkReference reports, told apart by their messages.
const (
	outside   = "leaves the repository"
	missing   = "not in the tree"
	noHeading = "no heading"
)

func kindOf(problem string) string {
	for _, k := range []string{outside, missing, noHeading} {
		if strings.Contains(problem, k) {
			return k
		}
	}
	return problem
}

func TestReferences(t *testing.T) {
	tree := map[string]bool{"controller/pkg/pool": true, "hack/up.sh": true, "README.md": true, "artifacts/base": true}
	exists := func(p string) bool { return tree[p] }
	for _, tc := range []struct {
		name     string
		markdown string
		want     []reference
		problems map[string]string // what checkReference must flag: target → kind of problem
	}{{
		name:     "a package as a link with its path as text",
		markdown: "See [`controller/pkg/pool`](controller/pkg/pool).",
		want:     []reference{{1, "controller/pkg/pool", false}, {1, "controller/pkg/pool", true}},
	}, {
		name:     "a folder link with a trailing slash, a file with a fragment",
		markdown: "[pool](controller/pkg/pool/) and [up](hack/up.sh#L3 \"title\")",
		want:     []reference{{1, "controller/pkg/pool/", true}, {1, "hack/up.sh#L3", true}},
	}, {
		name:     "a link out of the repository",
		markdown: "the [design](../shared/DESIGN.md)",
		want:     []reference{{1, "../shared/DESIGN.md", true}},
		problems: map[string]string{"../shared/DESIGN.md": outside},
	}, {
		name:     "a link that climbs out through the tree",
		markdown: "[x](hack/../../x.md)",
		want:     []reference{{1, "hack/../../x.md", true}},
		problems: map[string]string{"hack/../../x.md": outside},
	}, {
		name:     "absolute paths and other schemes",
		markdown: "[a](/etc/passwd) [b](file:///work/x) [c](mailto:a@b.c)",
		want:     []reference{{1, "/etc/passwd", true}, {1, "file:///work/x", true}, {1, "mailto:a@b.c", true}},
		problems: map[string]string{"/etc/passwd": outside, "file:///work/x": outside, "mailto:a@b.c": outside},
	}, {
		name:     "web links are allowed",
		markdown: "[psa](https://pkg.go.dev/k8s.io/pod-security-admission) [h](http://example.com)",
		want:     []reference{{1, "https://pkg.go.dev/k8s.io/pod-security-admission", true}, {1, "http://example.com", true}},
	}, {
		name:     "a reference definition and inline HTML",
		markdown: "[d]: ../DESIGN.md\n<a href=\"../x.md\">x</a>",
		want:     []reference{{1, "../DESIGN.md", true}, {2, "../x.md", true}},
		problems: map[string]string{"../DESIGN.md": outside, "../x.md": outside},
	}, {
		name:     "a code span names a path: its first word, which must exist",
		markdown: "run `hack/up.sh --wipe`, apply `./artifacts/base`, see `controller/pkg/shard`",
		want:     []reference{{1, "hack/up.sh", false}, {1, "artifacts/base", false}, {1, "controller/pkg/shard", false}},
		problems: map[string]string{"controller/pkg/shard": missing},
	}, {
		name:     "a path in code that climbs out",
		markdown: "`hack/../../etc/passwd`",
		want:     []reference{{1, "hack/../../etc/passwd", false}},
		problems: map[string]string{"hack/../../etc/passwd": outside},
	}, {
		name:     "a stale pattern of paths in code",
		markdown: "`controller/pkg/{pool,shard}`",
		want:     []reference{{1, "controller/pkg/{pool,shard}", false}},
		problems: map[string]string{"controller/pkg/{pool,shard}": missing},
	}, {
		name:     "a missing link target in the tree",
		markdown: "\n\n[gone](sidecars/internal/gone)",
		want:     []reference{{3, "sidecars/internal/gone", true}},
		problems: map[string]string{"sidecars/internal/gone": missing},
	}, {
		name:     "code that is not a path, and a link-like string inside code",
		markdown: "`--pool python`, `components: [../pause]`, `[x](../y)`, `control.kube-sandbox.io/pool`",
	}, {
		name:     "fenced code holds neither links nor paths",
		markdown: "```sh\n[x](../y) `controller/pkg/gone`\n```\n[ok](README.md)",
		want:     []reference{{4, "README.md", true}},
	}, {
		name:     "anchors must name a heading",
		markdown: "## Set up, in two commands\n[a](#set-up-in-two-commands) [b](#layout)",
		want:     []reference{{2, "#set-up-in-two-commands", true}, {2, "#layout", true}},
		problems: map[string]string{"#layout": noHeading},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := references(tc.markdown)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("references (-want +got):\n%s", diff)
			}
			anchors := headingAnchors(tc.markdown)
			var flagged map[string]string
			for _, r := range got {
				if problem := checkReference(r, exists, anchors); problem != "" {
					if flagged == nil {
						flagged = map[string]string{}
					}
					flagged[r.Target] = kindOf(problem)
				}
			}
			if diff := cmp.Diff(tc.problems, flagged); diff != "" {
				t.Errorf("flagged (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# kube-sandbox\n## Mutual TLS to execd; nothing shared in pods\n### gVisor as the platform's default\n" +
		"## `sandbox-node` and [egress](#egress)\n## Pools\n### Pools\n```\n## not a heading\n```\n")
	want := map[string]bool{
		"kube-sandbox": true,
		"mutual-tls-to-execd-nothing-shared-in-pods": true,
		"gvisor-as-the-platforms-default":            true,
		"sandbox-node-and-egress":                    true,
		"pools":                                      true,
		"pools-1":                                    true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headingAnchors (-want +got):\n%s", diff)
	}
}

func TestUnmapped(t *testing.T) {
	pkgs := []string{
		"controller/pkg/pool",
		"controller/pkg/tasks",
		"sidecars/execd",
		"sidecars/execd/internal/reaper",
		"sidecars/internal/netnstest",
		"plugin/pkg/cmd/testing/sandboxserver",
		clientsetRoot,
		clientsetRoot + "/typed/sandbox/v1alpha1",
		"apiserver/pkg/generated/openapi",
	}
	for _, tc := range []struct {
		name  string
		named []string
		want  []string
	}{{
		name:  "every package named, or below a named package",
		named: []string{"controller/pkg/pool", "controller/pkg/tasks", "sidecars/execd", clientsetRoot, "apiserver/pkg/generated/openapi"},
	}, {
		name:  "a row removed",
		named: []string{"controller/pkg/pool", "sidecars/execd", clientsetRoot, "apiserver/pkg/generated/openapi"},
		want:  []string{"controller/pkg/tasks"},
	}, {
		name:  "a named area is no package and vouches for nothing",
		named: []string{"controller", "controller/pkg", "apiserver", "sidecars", "plugin"},
		want:  []string{"apiserver/pkg/generated/clientset/versioned", "apiserver/pkg/generated/openapi", "controller/pkg/pool", "controller/pkg/tasks", "sidecars/execd", "sidecars/execd/internal/reaper"},
	}, {
		name:  "the clientset's root is not exempt, only what is generated below it",
		named: []string{"controller/pkg/pool", "controller/pkg/tasks", "sidecars/execd", "apiserver/pkg/generated/openapi"},
		want:  []string{clientsetRoot},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			named := map[string]bool{}
			for _, n := range tc.named {
				named[n] = true
			}
			if diff := cmp.Diff(tc.want, unmapped(pkgs, named)); diff != "" {
				t.Errorf("unmapped (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSection(t *testing.T) {
	md := "# top\n## For engineers\n[a](x)\n### sub\n[b](y)\n## Next\n[c](z)\n"
	text, first, last, ok := section(md, mapHeading)
	if !ok || first != 2 || last != 5 {
		t.Fatalf("section = %d-%d, %v; want 2-5, true", first, last, ok)
	}
	var got []string
	for _, r := range references(text) {
		got = append(got, fmt.Sprintf("%d:%s", r.Line, r.Target))
	}
	if diff := cmp.Diff([]string{"3:x", "5:y"}, got); diff != "" {
		t.Errorf("references of the section (-want +got):\n%s", diff)
	}
	if _, first, last, ok := section(text, "### sub"); !ok || first != 4 || last != 5 {
		t.Errorf("subsection = %d-%d, %v; want 4-5, true", first, last, ok)
	}
	if _, _, _, ok := section("## Layout\n", mapHeading); ok {
		t.Error("found a section that is not there")
	}
}

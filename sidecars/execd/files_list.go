package execd

import (
	"encoding/base64"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/kube-sandbox/kube-sandbox/sidecars/internal/httpjson"
)

// readdirChunk is how many names listing reads per getdents round.
const readdirChunk = 4096

// errPageFull stops a listing walk once a page is complete.
var errPageFull = errors.New("page full")

func (h *Handler) serveList(w http.ResponseWriter, req *http.Request, name string) error {
	limit, err := queryInt(req, LimitParam, DefaultListLimit, 1, MaxListLimit)
	if err != nil {
		return err
	}
	depth, err := queryInt(req, DepthParam, 1, 1, MaxListDepth)
	if err != nil {
		return err
	}
	var after []string
	if token := req.URL.Query().Get(ContinueParam); token != "" {
		raw, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil || len(raw) == 0 {
			return badRequest("parameter %s is not a token from a previous page", ContinueParam)
		}
		after = strings.Split(string(raw), "/")
		if len(after) > int(depth) || slices.Contains(after, "") {
			return badRequest("parameter %s is not a token from a previous page with %s=%d", ContinueParam, DepthParam, depth)
		}
	}
	dir, err := h.filesRoot.OpenRoot(name)
	if err != nil {
		return err
	}
	defer func() { _ = dir.Close() }()

	l := &lister{root: dir, limit: int(limit), maxDepth: int(depth)}
	if err := l.walk(".", 1, after); err != nil && !errors.Is(err, errPageFull) {
		return err
	}
	list := FileList{Kind: FileListKind, Items: l.items}
	if list.Items == nil {
		list.Items = []FileInfo{}
	}
	if l.more {
		list.Continue = base64.RawURLEncoding.EncodeToString([]byte(l.items[len(l.items)-1].Path))
	}
	httpjson.Write(w, http.StatusOK, &list)
	return nil
}

// lister produces one page of a listing: entries in depth-first order, each
// directory's entries sorted by name. The continue token is the path of the
// last entry returned; the next page resumes right after it in that order,
// so entries created or removed between pages shift nothing else.
type lister struct {
	root     *os.Root
	limit    int
	maxDepth int
	items    []FileInfo
	more     bool
}

// walk lists dir, at depth level, skipping what comes no later than after
// (the remaining components of the continue token at this level).
func (l *lister) walk(dir string, level int, after []string) error {
	var resume string
	if len(after) > 0 {
		resume = after[0]
	}
	// One more than the page still needs tells whether there is a next
	// page; one more again for the entry we resume at, already returned.
	names, err := smallestNames(l.root, dir, resume, len(after) > 0, l.limit-len(l.items)+2)
	if err != nil {
		return err
	}
	for _, name := range names {
		rel := path.Join(dir, name)
		var sub []string
		emit := true
		if len(after) > 0 && name == resume {
			// Returned already (last component) or an ancestor of the last
			// entry returned: only descend.
			emit = false
			sub = after[1:]
		}
		if emit && len(l.items) == l.limit {
			l.more = true
			return errPageFull
		}
		fi, err := l.root.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since it was read
		} else if err != nil {
			return err
		}
		if emit {
			l.items = append(l.items, describe(l.root, rel, rel, fi))
		}
		if fi.IsDir() && level < l.maxDepth {
			if err := l.walk(rel, level+1, sub); err != nil {
				return err
			}
		}
	}
	return nil
}

// smallestNames returns, sorted, the n smallest names in dir greater than
// after (or equal to it, with inclusive; all names when after is ""). It
// holds about 2n+readdirChunk names at a time, however large dir is.
func smallestNames(r *os.Root, dir, after string, inclusive bool, n int) ([]string, error) {
	f, err := r.Open(dir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var names []string
	trim := func() {
		slices.Sort(names)
		if len(names) > n {
			names = slices.Delete(names, n, len(names))
		}
	}
	for {
		chunk, err := f.Readdirnames(readdirChunk)
		for _, name := range chunk {
			if after == "" || name > after || (inclusive && name == after) {
				names = append(names, name)
			}
		}
		if len(names) > 2*n+readdirChunk {
			trim()
		}
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
	}
	trim()
	return names, nil
}

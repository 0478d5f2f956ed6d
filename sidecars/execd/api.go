package execd

import "github.com/kube-sandbox/kube-sandbox/sidecars/execd/execdapi"

// The files API's wire types and parameters live in package execdapi, which sandbox-apiserver
// and the kubectl plugin import without execd's dependencies; these names keep execd's own
// code short.
type (
	FileType = execdapi.FileType
	FileInfo = execdapi.FileInfo
	FileList = execdapi.FileList
)

const (
	FilesPath        = execdapi.FilesPath
	MetricsPath      = execdapi.MetricsPath
	FileListKind     = execdapi.FileListKind
	StatParam        = execdapi.StatParam
	LimitParam       = execdapi.LimitParam
	ContinueParam    = execdapi.ContinueParam
	DepthParam       = execdapi.DepthParam
	TypeParam        = execdapi.TypeParam
	ModeParam        = execdapi.ModeParam
	MkdirsParam      = execdapi.MkdirsParam
	MaxBytesParam    = execdapi.MaxBytesParam
	RecursiveParam   = execdapi.RecursiveParam
	MoveToParam      = execdapi.MoveToParam
	OverwriteParam   = execdapi.OverwriteParam
	FileModeHeader   = execdapi.FileModeHeader
	DefaultListLimit = execdapi.DefaultListLimit
	MaxListLimit     = execdapi.MaxListLimit
	MaxListDepth     = execdapi.MaxListDepth
	FileTypeFile     = execdapi.FileTypeFile
	FileTypeDir      = execdapi.FileTypeDir
	FileTypeSymlink  = execdapi.FileTypeSymlink
	FileTypeOther    = execdapi.FileTypeOther
)

// FilesURL is execdapi.FilesURL.
var FilesURL = execdapi.FilesURL

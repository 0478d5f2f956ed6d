package execd

import "github.com/kube-sandbox/kube-sandbox/sidecars/execd/fileapi"

// The files API's wire types and parameters live in package fileapi, which sandbox-apiserver
// and the kubectl plugin import without execd's dependencies; these names keep execd's own
// code short.
type (
	FileType = fileapi.FileType
	FileInfo = fileapi.FileInfo
	FileList = fileapi.FileList
)

const (
	FilesPath        = fileapi.FilesPath
	MetricsPath      = fileapi.MetricsPath
	FileListKind     = fileapi.FileListKind
	StatParam        = fileapi.StatParam
	LimitParam       = fileapi.LimitParam
	ContinueParam    = fileapi.ContinueParam
	DepthParam       = fileapi.DepthParam
	TypeParam        = fileapi.TypeParam
	ModeParam        = fileapi.ModeParam
	MkdirsParam      = fileapi.MkdirsParam
	MaxBytesParam    = fileapi.MaxBytesParam
	RecursiveParam   = fileapi.RecursiveParam
	MoveToParam      = fileapi.MoveToParam
	OverwriteParam   = fileapi.OverwriteParam
	FileModeHeader   = fileapi.FileModeHeader
	DefaultListLimit = fileapi.DefaultListLimit
	MaxListLimit     = fileapi.MaxListLimit
	MaxListDepth     = fileapi.MaxListDepth
	FileTypeFile     = fileapi.FileTypeFile
	FileTypeDir      = fileapi.FileTypeDir
	FileTypeSymlink  = fileapi.FileTypeSymlink
	FileTypeOther    = fileapi.FileTypeOther
)

// FilesURL is fileapi.FilesURL.
var FilesURL = fileapi.FilesURL

package routes

import (
	"encoding/base64"
	"os"
)

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func writeFile(path, src string) error { return os.WriteFile(path, []byte(src), 0o600) }

//go:build !race

package store

const raceBuild = false // see race_test.go

// Package e2e holds the end-to-end tests of Kollect: the API against a real apiserver and the
// fleet scenario on several local control planes (package testenv starts them).
package e2e

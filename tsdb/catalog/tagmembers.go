package catalog

// TagMembers is members to merge into one tag's posting list: one list of a request
// that merges into many at once.
type TagMembers struct {
	Tag     Tag
	Members []Member
}

package frequency

import (
	"encoding/json"
	"log"

	"github.com/nbutton23/zxcvbn-go/data"
)

// List holds a frequency list
type List struct {
	Name string
	List []string
}

// Load decodes every frequency list from the embedded data. Each call
// decodes them anew (about 6 MB once built into dictionaries): the caller
// decides how long to keep them. Upstream decoded them into a package
// variable at init, so every program importing the package held them for
// its whole life.
func Load() map[string]List {
	return map[string]List{
		"MaleNames":   getStringListFromAsset(getAsset("data/MaleNames.json"), "MaleNames"),
		"FemaleNames": getStringListFromAsset(getAsset("data/FemaleNames.json"), "FemaleNames"),
		"Surname":     getStringListFromAsset(getAsset("data/Surnames.json"), "Surname"),
		"English":     getStringListFromAsset(getAsset("data/English.json"), "English"),
		"Passwords":   getStringListFromAsset(getAsset("data/Passwords.json"), "Passwords"),
	}
}

func getAsset(name string) []byte {
	data, err := data.Asset(name)
	if err != nil {
		panic("Error getting asset " + name)
	}

	return data
}
func getStringListFromAsset(data []byte, name string) List {

	var tempList List
	err := json.Unmarshal(data, &tempList)
	if err != nil {
		log.Fatal(err)
	}
	tempList.Name = name
	return tempList
}
